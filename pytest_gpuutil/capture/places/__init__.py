"""The host's side of the findings' places: source places at the synchronizing calls and copies
(``calls``, with the C frame reader ``_frames.c``), the test thread's stack samples (``sampler``),
and the object a capture holds (``host``)."""
