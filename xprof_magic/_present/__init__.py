"""A finished run as both fronts present it, whatever draws it.

May import the viewer, the analysis and the runs; never a front. Its modules, and what each
holds, are in ARCHITECTURE.md's table.
"""
