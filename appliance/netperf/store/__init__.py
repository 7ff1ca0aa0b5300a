"""A run on disk: typed records, the run directory's files, and which runs are kept."""
