"""File-partition source (``source: files``): partitions of a landing dir → raw.<job>.

docs/files-source.md: partitions.py finds partitions and says which are ready, leases.py keeps
runs from taking the same partition, reader.py reads a file into raw rows; the ingestion
step is steps/ingest/files.py (called by steps/ingest/land.py for files jobs).
"""
