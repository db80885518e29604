"""The capture where no IPython magic runs: ``xprof_magic.profile`` for marimo and scripts.

May import every stage below it, never the Jupyter front; marimo itself never. Its modules, and
what each holds, are in ARCHITECTURE.md's table.
"""
