"""Stage 3, diagnose: what bounds the cell, where in its code, and which fix, as figures.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
