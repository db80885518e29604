"""How a cell becomes labelled blocks and steps: the first stage, before any capture.

May import the standard library only. Its modules, and what each holds, are in ARCHITECTURE.md's
table.
"""
