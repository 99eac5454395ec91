"""Where a request meets its defaults (filled in by the design step)."""
