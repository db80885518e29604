"""The viewer's server process and its lifecycle, from the kernel's side and from its own.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
