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
        buf = ctypes.create_string_buffer(1 << 14)
        entries: list[bytes] = []
        ends = set(key)
        for t in range(model.n_vocab):
            n = L.llama_token_to_piece(vocab, t, buf, len(buf) - 1, 0, True)
            if n < 0:
                raise ValueError(f"token {t} of the vocabulary is longer than {len(buf)} bytes")
            piece = buf.raw[:n]
            if _special(L, vocab, t, piece):
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


def _special(L, vocab, token: int, piece: bytes) -> bool:
    """llguidance sees ``token`` as a special token (``<[id]>`` in a grammar), not text:
    a control token, or a user-defined one that looks like a marker (``<tool_call>``)."""
    attr = L.llama_vocab_get_attr(vocab, token)
    return bool(attr & L.LLAMA_TOKEN_ATTR_CONTROL) or bool(
        attr & L.LLAMA_TOKEN_ATTR_USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")
    )


def grammar_literal(model: Model):
    """A function writing marker text as a grammar literal for ``model``: the special
    tokens the marker tokenizes to as ``<[id]>``, the rest as quoted text."""
    import json

    L = llama()

    def lit(text: str) -> str:
        parts: list[str] = []
        run = b""
        for t in model.tokenize(text, add_special=False, parse_special=True):
            shown = model.token_text(t).encode("utf-8")
            if _special(L, model._vocab, t, model.piece(t) or shown):
                if run:
                    parts.append(json.dumps(run.decode("utf-8", "replace"), ensure_ascii=False))
                    run = b""
                parts.append(f"<[{t}]>")
            else:
                run += model.piece(t)
        if run:
            parts.append(json.dumps(run.decode("utf-8", "replace"), ensure_ascii=False))
        return " ".join(parts) or '""'

    return lit


def shown_markers(model: Model, markers: tuple[str, ...]) -> frozenset[int]:
    """The control tokens among ``markers`` (which render as no text): a reply must show
    them as their text for its parser to see them (``[TOOL_CALLS]``, ``<|python_tag|>``)."""
    out = set()
    for m in markers:
        if not m:
            continue
        for t in model.tokenize(m, add_special=False, parse_special=True):
            if not model.piece(t) and model.token_text(t):
                out.add(t)
    return frozenset(out)
