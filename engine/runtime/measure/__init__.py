"""Measuring tools: the A/B speculation benchmark (``bench``, plotted by ``benchplot``, its time split by ``profile``),
the batch-noise measurement (``batchnoise``: is a row independent of its batch?) and the
side-by-side comparison with llama-server (``versus``). None of them is on the decode
path; they run on the engine thread through :class:`~engine.runtime.jobs.Call`."""
