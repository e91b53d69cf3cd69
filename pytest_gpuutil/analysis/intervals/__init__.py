"""Time intervals: the GPU's idle around the host's waits (``waits``, the host-sync rule's figures)
and the unions of intervals in C (``_unions``, for the plain-Python analysis of a trace)."""
