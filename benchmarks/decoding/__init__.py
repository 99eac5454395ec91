"""Benchmarks of the decode itself, in process: MTP against plain on the demo and real models,
the time a step spends outside llama.cpp, identity and batch noise, recorded round costs,
sampling, structured output, drafts from the conversation, the prompt cache, and llama-cpp-
python's own decode.
"""
