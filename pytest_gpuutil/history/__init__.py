"""Past one run: merging CI shards, the run history (SQLite) and the noise-aware comparison with it."""
