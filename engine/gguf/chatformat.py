"""Which chat format a model without a template speaks, from its vocabulary.

A file with no ``tokenizer.chat_template`` (a base model, an old conversion) is chatted
with in one of llama.cpp's built-in formats, chosen by the turn markers its vocabulary
holds as whole tokens: Gemma vocabularies hold ``<start_of_turn>``, Llama 3 holds
``<|start_header_id|>``, ChatML models ``<|im_start|>``. One rule serves the header-only
``inspect`` and the runtime (which asks llama.cpp's vocabulary instead).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from engine.gguf.reader import GGUFHeader

#: llama.cpp built-in template -> (tokens that identify it, all required; markers that
#: end a turn). Checked in this order.
BUILTINS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "gemma": (("<start_of_turn>", "<end_of_turn>"), ("<end_of_turn>", "<start_of_turn>")),
    "llama3": (("<|start_header_id|>", "<|eot_id|>"), ("<|eot_id|>", "<|start_header_id|>")),
    "phi3": (("<|user|>", "<|end|>", "<|assistant|>"), ("<|end|>", "<|user|>")),
    "chatml": (("<|im_start|>", "<|im_end|>"), ("<|im_end|>", "<|im_start|>")),
    "mistral-v7": (("[INST]", "[/INST]", "[SYSTEM_PROMPT]"), ("[INST]",)),
    "llama2": (("[INST]", "[/INST]"), ("[INST]",)),
}

#: markers that end a turn in any known format (for templates from files)
ALL_END_MARKERS = tuple(dict.fromkeys(m for _, ends in BUILTINS.values() for m in ends))


def detect_builtin(has_token: Callable[[str], bool]) -> str | None:
    """The first built-in format whose identifying tokens are all in the vocabulary."""
    for name, (required, _) in BUILTINS.items():
        if all(has_token(t) for t in required):
            return name
    return None


def header_has_token(h: GGUFHeader) -> Callable[[str], bool]:
    """Membership test on the header's ``tokenizer.ggml.tokens`` array, without decoding
    it (a 262k-token vocabulary): a token is a length-prefixed string in the array."""
    kv = h.kvs.get("tokenizer.ggml.tokens")
    raw = kv.raw_value if kv is not None else b""
    return lambda text: (struct.pack("<Q", len(text.encode())) + text.encode()) in raw


def header_chat_format(h: GGUFHeader) -> str:
    """What ``inspect`` says about a file's chat template."""
    if h.get("tokenizer.chat_template") is not None:
        return "the model's own (tokenizer.chat_template)"
    name = detect_builtin(header_has_token(h))
    if name is not None:
        return f"none in the file; llama.cpp built-in '{name}' (from its vocabulary)"
    return "none in the file; ChatML by default"
