"""Runs on disk or in Cloud Storage: where a capture lands, and what is stored beside it.

* ``store`` -- the log directory's layout (``<logdir>/plugins/profile/<run>/``), staging
  and the one-rename commit, run names, the atomic JSON write, the runs there are;
* ``logdir`` -- a log directory as one value (a local folder and the ``gs://`` location it
  mirrors) and the one commit-and-upload every capture shares;
* ``gcs`` -- ``gs://`` log directories: the bucket check, the upload, the copy down;
* ``metadata`` -- ``xprof_magic.json``'s one schema, :class:`~xprof_magic._runs.metadata.
  RunMetadata`.

May import :mod:`xprof_magic._cell` (the label times the metadata holds) and ``_units``;
google-cloud-storage only inside ``gcs``, and ``gcs`` only for a ``gs://`` log directory.
Never the capture, the analysis, the viewer or a front. Its modules import each other
directly, never through this package.
"""
