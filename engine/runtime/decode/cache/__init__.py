"""The prompt cache: a session's state at a prompt position (``snapshot``) and the
host-memory store that keeps and plans them (``snapshotcache``)."""
