"""The background preparation of timelines: each run converted before it is looked at.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
