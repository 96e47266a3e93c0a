"""The ``foreachBatch`` sink: one instant per micro-batch, exactly once."""
