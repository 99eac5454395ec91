"""The ctypes layer: the only code that holds llama.cpp objects.

``lib`` loads llama-cpp-python's bindings (once, after the backend build and exact mode
are decided); ``model``, ``context`` and ``batch`` wrap ``llama_model``, ``llama_context``
and ``llama_batch`` with numpy views; ``owned`` frees them on the thread that made them;
``devices`` lists ggml's compute devices; ``quantize`` runs llama.cpp's quantizer;
``exact`` is the batch-invariant configuration; ``cachekey`` keys what was learned about
a (model files, build, settings) combination. Engine thread only, like everything that
touches a context.
"""
