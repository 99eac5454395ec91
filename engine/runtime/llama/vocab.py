"""The model's vocabulary as llguidance's tokenizer (grammar-constrained decoding).

Built from llama.cpp's own vocabulary — every token's bytes, control tokens marked the
way llguidance expects (a ``0xff`` prefix), and llama.cpp's tokenizer for the grammar's
forced text — never from a Hugging Face tokenizer the user may not have. Building it
walks the whole vocabulary (about a second at 250k tokens), so it is made once per
loaded model and set of end tokens, on the engine thread.
"""

from __future__ import annotations

import ctypes

from engine.runtime.llama.lib import llama
from engine.runtime.llama.model import Model


def grammar_tokenizer(model: Model, end_tokens: frozenset[int] = frozenset()):
    """llguidance's ``LLTokenizer`` for ``model``; the grammar allows the model's
    end-of-generation tokens (and ``end_tokens``, a chat template's turn ends) only where
    it is complete. Cached on the model."""
    import llguidance

    key = frozenset(end_tokens)
    tok = model.grammar_tokenizers.get(key)
    if tok is None:
        L = llama()
        vocab = model._vocab
        control = L.LLAMA_TOKEN_ATTR_CONTROL
        user = L.LLAMA_TOKEN_ATTR_USER_DEFINED
        buf = ctypes.create_string_buffer(1 << 14)
        entries: list[bytes] = []
        ends = set(key)
        for t in range(model.n_vocab):
            n = L.llama_token_to_piece(vocab, t, buf, len(buf) - 1, 0, True)
            if n < 0:
                raise ValueError(f"token {t} of the vocabulary is longer than {len(buf)} bytes")
            piece = buf.raw[:n]
            attr = L.llama_vocab_get_attr(vocab, t)
            if attr & control or (attr & user and piece.startswith(b"<") and piece.endswith(b">")):
                piece = b"\xff" + piece  # a special token: never matched as text
            entries.append(piece)
            if model.is_eog(t):
                ends.add(t)
        fptr = ctypes.cast(L.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        tok = llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
            tokens=entries, vocab_ptr=vocab, tokenize_fptr=fptr, eos_token=sorted(ends) or [model.eos], slices=None
        )
        model.grammar_tokenizers[key] = tok
    return tok
