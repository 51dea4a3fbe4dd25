"""The journal's archive: Parquet files partitioned by cluster and day, with a manifest.

``archive.writer`` (``allot archive``) copies the journal topic into a
directory, ``archive.manifest`` says which offsets each file holds (so a
record read twice is written once, and a crash loses nothing),
``archive.restore`` puts the journal back into a broker that lost it (the
embedded stack), and ``archive.events`` reads the archive as an event log for
the audit. The layout is a contract (``archive.layout``, docs/archive.md).
"""
