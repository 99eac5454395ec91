"""Grammar-constrained decoding: what a request may generate, and the state that enforces it.

A request's constraint (:class:`GrammarSpec`: a JSON schema, any JSON object, a Lark or
GBNF grammar, or a regex) is compiled by llguidance (:func:`compile_grammar`, bounded in
size and effort; a bad one is an :class:`InvalidRequestError` naming the problem). During
the generation a :class:`Constraint` follows the tokens chosen so far and decides the
next one with :meth:`Constraint.choose`: a token the grammar forces (the only bytes it
allows next, e.g. a JSON key or a closing brace) is taken without consulting the model;
otherwise the token is picked from the model's row with every token the grammar forbids
masked out. End-of-generation is allowed only where the grammar is complete.

Plain decoding and every row of a speculative verify go through the same
:meth:`~Constraint.choose`, and the matcher consumes exactly the chosen tokens, so
constrained speculation emits what constrained plain decoding emits. Forced tokens are
known before any forward pass: they are the speculative round's draft (no head call)
and, with MTP off, are decoded in one batch with the token before them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.errors import DecodeError, InvalidRequestError

#: what a request may ask for (``grammar`` is llama.cpp's GBNF, or Lark)
KINDS = ("json_schema", "json_object", "lark", "gbnf", "regex")
#: built here, never taken from a request: llguidance's own grammar list (JSON), e.g. a
#: reply's thinking + answer + tool-call grammar (engine.runtime.prompt.replygrammar)
INTERNAL_KINDS = ("llguidance", "tool_schema")
#: largest grammar or schema text accepted (characters)
MAX_GRAMMAR_CHARS = 200_000
#: JSON is generated compact (no whitespace between tokens): a model cannot pad forever
#: with spaces, and every key, quote, colon and comma is forced — free tokens. A schema
#: can ask otherwise with llguidance's ``x-guidance`` options.
JSON_OPTIONS = {"whitespace_flexible": False}
#: a tool's argument schema comes from an agent, not from the user asking for output of a
#: shape: keywords llguidance does not implement (``propertyNames``, …) are ignored there
#: (the arguments may then be looser than the schema) instead of refusing the request
TOOL_JSON_OPTIONS = {**JSON_OPTIONS, "lenient": True}


@dataclass(frozen=True)
class GrammarSpec:
    """A constraint as the request gave it. ``source``: the schema as JSON text, or the
    grammar or regex text; empty for ``json_object``."""

    kind: str
    source: str = ""
    #: the request field it came from (for the 400's ``param``; not part of its identity)
    param: str = field(default="response_format", compare=False)

    @classmethod
    def json_schema(cls, schema: Any, param: str = "response_format") -> GrammarSpec:
        if not isinstance(schema, (dict, bool)):
            raise InvalidRequestError("a JSON schema must be a JSON object", param=param)
        return cls("json_schema", json.dumps(schema, separators=(",", ":")), param)


def _limits():
    import llguidance

    # bounded effort: a hostile grammar fails to compile instead of taking the engine thread
    return llguidance.LLParserLimits(initial_lexer_fuel=2_000_000, max_grammar_size=300_000, verbose_errors=False)


@functools.lru_cache(maxsize=64)
def compile_grammar(spec: GrammarSpec) -> str:
    """llguidance's grammar for ``spec``, checked; raises :class:`InvalidRequestError`.
    Cached: agents send the same schema with every request."""
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark

    if spec.kind not in KINDS + INTERNAL_KINDS:
        raise InvalidRequestError(
            f"unknown constraint kind {spec.kind!r} (use one of {', '.join(KINDS)})", param=spec.param
        )
    if len(spec.source) > MAX_GRAMMAR_CHARS:
        raise InvalidRequestError(
            f"the {spec.kind.replace('_', ' ')} is {len(spec.source)} characters; at most {MAX_GRAMMAR_CHARS} are "
            "accepted",
            param=spec.param,
        )
    try:
        if spec.kind == "json_object":
            grammar = llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_OPTIONS)
        elif spec.kind == "json_schema":
            grammar = llguidance.LLMatcher.grammar_from_json_schema(spec.source, defaults=JSON_OPTIONS)
        elif spec.kind == "tool_schema":
            grammar = llguidance.LLMatcher.grammar_from_json_schema(spec.source, defaults=TOOL_JSON_OPTIONS)
        elif spec.kind == "llguidance":
            grammar = spec.source
        elif spec.kind == "regex":
            grammar = llguidance.LLMatcher.grammar_from_regex(spec.source)
        elif spec.kind == "gbnf":
            grammar = llguidance.LLMatcher.grammar_from_lark(any_to_lark(spec.source))
        else:
            grammar = llguidance.LLMatcher.grammar_from_lark(spec.source)
    except Exception as e:  # llguidance raises ValueError; the GBNF converter anything
        raise InvalidRequestError(f"the {spec.kind.replace('_', ' ')} cannot be used: {e}", param=spec.param) from None
    error = llguidance.LLMatcher.validate_grammar(grammar, None, limits=_limits())
    if error:
        raise InvalidRequestError(f"the {spec.kind.replace('_', ' ')} cannot be used: {error}", param=spec.param)
    return grammar


#: picks a token from a (masked) logits row at an absolute position
Pick = Callable[[np.ndarray, int], int]


class Constraint:
    """One generation's grammar state: llguidance's matcher over the tokens chosen so far.
    Engine thread only."""

    def __init__(self, tokenizer, grammar: str, n_vocab: int):
        import llguidance

        self.n_vocab = n_vocab
        self.matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0, limits=_limits())
        if self.matcher.is_error():
            raise InvalidRequestError(f"the constraint cannot be used: {self.matcher.get_error()}")
        #: tokens taken because the grammar forced them (no model involved)
        self.forced_count = 0

    # ------------------------------------------------------------------ state
    @property
    def accepting(self) -> bool:
        return self.matcher.is_accepting()

    def forced(self) -> int | None:
        """The next token when the grammar leaves no choice, else None."""
        if self.matcher.is_stopped():
            return None
        ff = self.matcher.compute_ff_tokens()
        return ff[0] if ff else None

    def take_forced(self, limit: int) -> list[int]:
        """Consume the forced tokens from here on (at most ``limit``) and return them."""
        out = self._consume_forced(limit)
        self.forced_count += len(out)
        return out

    def forced_run(self, limit: int) -> list[int]:
        """The forced tokens from here on (at most ``limit``), without consuming them
        (found on a copy of the matcher: rolling back across a token-limited part of the
        grammar, such as a thinking budget, does not restore its count)."""
        if self.forced() is None:
            return []
        probe = self.matcher.deep_copy()
        out: list[int] = []
        while len(out) < limit and not probe.is_stopped():
            ff = probe.compute_ff_tokens()
            if not ff:
                break
            for t in ff[: limit - len(out)]:
                if not probe.consume_token(t):
                    return out
                out.append(t)
        return out

    def _consume_forced(self, limit: int) -> list[int]:
        out: list[int] = []
        while len(out) < limit:
            t = self.forced()
            if t is None:
                break
            self._consume(t)
            out.append(t)
        return out

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of ``tokens`` the grammar allows from here (without consuming)."""
        return self.matcher.validate_tokens(tokens) if tokens else 0

    def allowed(self) -> np.ndarray:
        """A boolean mask over the vocabulary: the tokens allowed next."""
        bits = np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint8)
        return np.unpackbits(bits, bitorder="little")[: self.n_vocab].astype(bool)

    def masked(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every forbidden token at -inf."""
        out = np.array(logits, dtype=np.float32, copy=True)
        out[~self.allowed()] = -np.inf
        return out

    # ---------------------------------------------------------------- choose
    def choose(self, logits: np.ndarray, position: int, pick: Pick) -> int:
        """The token at ``position``: the forced one, or ``pick`` over the masked row;
        consumed."""
        t = self.forced()
        if t is not None:
            self.forced_count += 1
        else:
            t = pick(self.masked(logits), position)
        self._consume(t)
        return t

    def distribution(self, logits: np.ndarray, dense: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The distribution :meth:`choose` samples from at this state (one-hot where a
        token is forced), as a vocabulary-sized vector. Does not consume."""
        t = self.forced()
        if t is not None:
            p = np.zeros(np.asarray(logits).size, np.float64)
            p[t] = 1.0
            return p
        return dense(self.masked(logits))

    def take(self, token: int) -> None:
        """Consume a token chosen elsewhere (a rejection-sampling draw)."""
        self._consume(token)

    def _consume(self, token: int) -> None:
        if not self.matcher.consume_token(token):
            raise DecodeError(f"the grammar refused token {token}: {self.matcher.get_error()}")
