"""The A/B speculation benchmark the user runs on their own model (``bench``: the Performance
page and ``mtp-studio bench --model``), its plot (``benchplot``) and its time split
(``profile``: ``bench --profile``), and the batch-noise checks the self-test and the bench's
mismatch reports rely on (``batchnoise``). None of them is on the decode path; they run on
the engine thread through :class:`~engine.runtime.jobs.Call`. Benchmarks that measure the
project itself (against llama-server, over HTTP, in processes of their own) are the source
checkout's ``benchmarks`` package, not the product's."""
