"""Pooling other machines through llama.cpp's RPC backend (``GGML_RPC``).

:mod:`engine.rpc.endpoints` parses and checks ``host:port`` lists; :mod:`engine.rpc.server`
runs llama.cpp's RPC server for this machine's devices (``mtp-studio rpc serve``). Using
remote devices from a model is :mod:`engine.runtime.load.rpcdevices` (registration),
:mod:`engine.runtime.load.placement` (the layer split), :mod:`engine.runtime.load.rpcsurvey`
(listing devices from a child) and :mod:`engine.runtime.worker` (the child engine process
such a model runs in: llama.cpp's RPC client aborts the process on any lost connection).
"""
