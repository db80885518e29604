"""The Jupyter front: ``%%xprof`` and ``%xprof``, and what they show under a cell.

May import every stage below it, never the marimo front. Its modules, and what each holds, are
in ARCHITECTURE.md's table.
"""
