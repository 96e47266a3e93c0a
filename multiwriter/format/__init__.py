"""The bytes Hudi puts on storage, and nothing of what they mean: Avro containers and schemas,
HFile, log files and their blocks, the LSM history's files and manifests, instant and data file
names, the path parts a table's files are built from, and the bounds every decoder applies.

Pure functions from bytes to values and back (a few read and write through :mod:`..storage`);
:mod:`multiwriter.table` keeps what a table means (timelines, file slices, merge rules, the
metadata table's semantics). An import-linter contract keeps this package below ``table``.
"""
