"""From a request's messages to prompt text: the model's chat template (``templates``),
rendered the way transformers and llama.cpp do (``chat``)."""
