"""Benchmarks for xprof_magic: ``make bench`` (``python -m bench``) writes BENCHMARKS.md."""
