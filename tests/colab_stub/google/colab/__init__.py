"""A stand-in for Colab's ``google.colab``, put on a test kernel's path: only what could be
called. No ``google/__init__.py`` above it, so ``google.protobuf`` still imports."""

from google.colab import output

__all__ = ["output"]
