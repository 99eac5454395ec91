"""A tiny, deterministic byte-level BPE tokenizer for synthetic GGUF models.

Synthetic models (test fixtures, the bundled demo, benchmark models) need a real
tokenizer that llama.cpp loads as ``tokenizer.ggml.model = gpt2``: the 256 byte
symbols of GPT-2's byte-to-unicode table, a few hundred learned merges, and the
ChatML control tokens. Training is a plain most-frequent-pair loop over a fixed
corpus, with ties broken lexically so the same inputs always give the same vocab.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

# Token types as llama.cpp reads them (tokenizer.ggml.token_type).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3

# Close to the GPT-2 / Qwen2 pre-tokenizer split, good enough for training merges.
_PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")

DEFAULT_CORPUS = """\
MTP Studio runs local language models fast with native multi-token prediction.
The draft head proposes the next tokens, the target model verifies the whole span in
one batch, accepts the matching prefix and rolls back the rest. Speculation never
changes the output: greedy decoding with drafts emits exactly the tokens plain greedy
decoding would. Hello! How are you today? I am a small test model. What is the
weather like? Tell me a story about a cat, a dog and the quick brown fox that jumps
over the lazy dog. One two three four five six seven eight nine ten. The answer is 42.
system user assistant You are a helpful assistant. Please answer the question.
"""


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character table."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes)}


@dataclass(frozen=True)
class BpeVocab:
    """Token strings (byte-level unicode form), their types, and the merge list."""

    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]

    def id_of(self, text: str) -> int:
        """Id of the token whose *decoded* text is ``text`` (specials by name)."""
        if text in SPECIAL_TOKENS:
            return self.tokens.index(text)
        table = bytes_to_unicode()
        return self.tokens.index("".join(table[b] for b in text.encode("utf-8")))

    @property
    def special_ids(self) -> dict[str, int]:
        return {name: self.tokens.index(name) for name in SPECIAL_TOKENS}


def train_bpe(corpus: str = DEFAULT_CORPUS, n_merges: int = 180, extra_words: tuple[str, ...] = ()) -> BpeVocab:
    """Learn ``n_merges`` merges over ``corpus`` (plus ``extra_words``, which are
    weighted heavily so they become single tokens when merges allow)."""
    table = bytes_to_unicode()
    words: Counter[tuple[str, ...]] = Counter()
    for piece in _PRETOKENIZE.findall(corpus):
        words[tuple(table[b] for b in piece.encode("utf-8"))] += 1
    for word in extra_words:
        for piece in _PRETOKENIZE.findall(word):
            words[tuple(table[b] for b in piece.encode("utf-8"))] += 1000

    vocab = [table[b] for b in range(256)]
    merges: list[str] = []
    for _ in range(n_merges):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best_count = max(pairs.values())
        a, b = min(p for p, c in pairs.items() if c == best_count)
        merges.append(f"{a} {b}")
        vocab.append(a + b)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, count in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged

    tokens = vocab + list(SPECIAL_TOKENS)
    types = [TOKEN_TYPE_NORMAL] * len(vocab) + [TOKEN_TYPE_CONTROL] * len(SPECIAL_TOKENS)
    return BpeVocab(tuple(tokens), tuple(types), tuple(merges))
