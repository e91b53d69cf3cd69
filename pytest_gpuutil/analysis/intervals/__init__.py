"""Time intervals: the GPU's idle around the host's waits (``waits``, the host-sync rule's figures),
the unions of intervals in C (``_unions``, for the plain-Python analysis of a trace), that
analysis's whole per-event work in one C call (``_figures``, through ``event_figures``), and many
windows' unions, counts and rankings at once as columns (``window_columns``, a flush's figures)."""
