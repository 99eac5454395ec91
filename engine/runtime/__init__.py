"""Everything that touches llama.cpp: the engine thread, its jobs and the request step,
and below them ``load/`` (loading safely), ``decode/`` (the hot path), ``prompt/`` (chat
templates), ``llama/`` (the ctypes layer) and ``limits``; ``measure/`` holds the tools.
docs/development.md draws the layers and one request's path."""
