"""Stage 1, read: one host's ``<host>.xplane.pb`` -> :class:`~.facts.TraceFacts`.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
