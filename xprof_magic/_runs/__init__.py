"""Runs on disk or in Cloud Storage: where a capture lands, and what is stored beside it.

May import the cell (the label times the metadata holds); google-cloud-storage only in ``gcs``.
Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
