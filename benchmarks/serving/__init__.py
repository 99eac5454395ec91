"""Benchmarks of the endpoint under load: our server and llama-server started as processes
(servers), concurrent streaming clients (slots), agent workloads and APIs, the endpoint's
own overhead, models loaded on demand, count_tokens latency beside streams.
"""
