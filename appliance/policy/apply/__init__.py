"""The policy's I/O part: the planner's State read from the switch, the engine that applies a plan in one
transaction, the writer, OpenFlow meters and the journal (audit log and rollback records)."""
