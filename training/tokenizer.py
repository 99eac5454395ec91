"""A byte-level BPE trained with Hugging Face ``tokenizers``, tokenizing exactly as
llama.cpp's ``gpt2`` tokenizer with the ``qwen2`` pre-tokenizer does.

The pre-tokenizer is the qwen2 split regex followed by GPT-2's byte-to-unicode mapping,
with no normaliser (llama.cpp applies none). The vocabulary is written into the GGUF in
id order with the merges, so llama.cpp reproduces these ids (the parity test checks it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from engine.synth.tokenizer import SPECIAL_TOKENS, TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL, BpeVocab

# llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2 split (src/llama-vocab.cpp)
QWEN2_SPLIT = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def train(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def to_vocab(tok: Tokenizer) -> BpeVocab:
    """The GGUF view: tokens in id order, their types, and the merge list."""
    model = json.loads(tok.to_str())["model"]
    by_id = sorted(tok.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ValueError("token ids are not dense")
    tokens = tuple(t for t, _ in by_id)
    types = tuple(TOKEN_TYPE_CONTROL if t in SPECIAL_TOKENS else TOKEN_TYPE_NORMAL for t in tokens)
    merges = tuple(m if isinstance(m, str) else " ".join(m) for m in model["merges"])
    return BpeVocab(tokens, types, merges)


def load(path) -> Tokenizer:
    return Tokenizer.from_file(str(path))
