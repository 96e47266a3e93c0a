"""The on-disk Hudi Copy-on-Write table: properties, timeline, file groups, snapshots."""
