"""GPU work of the processes a test starts: the per-run spool, the child side, the parent side."""
