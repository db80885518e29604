"""Stage 2, build: a run's metadata and its timeline's facts -> a summary.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
