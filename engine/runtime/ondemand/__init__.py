"""Models served by name: loaded on demand, unloaded when idle (see residency)."""
