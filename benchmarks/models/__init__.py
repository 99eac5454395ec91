"""Benchmarks of getting a model ready: memory estimates against measured peaks, composing a
head into a target, downloads against curl, and models spread over RPC servers.
"""
