"""Third-party GPU suites run under the plugin (their sources are fetched, never committed)."""
