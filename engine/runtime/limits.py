"""Guards for the settings that make llama.cpp assert instead of returning an error.

llama.cpp ends the whole process (``GGML_ASSERT``) on some settings it accepts at
context creation: a context of a few tokens, or recurrent rollback snapshots
(``n_rs_seq``, the draft depth) that do not fit the micro-batch it really uses
(``n_ubatch > n_keep_tail``). Every entry point (GUI, CLI, server, settings file) builds
a :class:`~engine.runtime.load.loader.LoadSpec`, and every spec goes through
:func:`check_load_settings` before llama.cpp sees it; a context is then checked again
with the sizes llama.cpp reports back (:func:`check_context_sizes`).
"""

from __future__ import annotations

import math

from engine.errors import ContextError, InvalidSettingError

#: smallest context MTP Studio creates: a chat template alone takes tens of tokens
MIN_CTX = 64
#: deepest draft any setting may ask for; auto depth stays within ``max_draft_depth``
MAX_DRAFT_DEPTH = 16
#: largest batch a context is created with (llama.cpp clamps it to the context anyway)
MAX_BATCH = 8192
#: stop strings per request (OpenAI allows 4) and characters in one: every generated
#: token is checked against each, on the one engine thread
MAX_STOP_STRINGS = 4
MAX_STOP_CHARS = 256
#: most alternatives a token's log-probability comes with (OpenAI's limit)
MAX_TOP_LOGPROBS = 20
#: a seed is an unsigned 64-bit number; -1 means "no seed" (llama.cpp's convention)
MAX_SEED = 2**64 - 1


def check_int(
    name: str, value: object, low: int, high: int | None = None, *, hint: str = "", param: str | None = None
) -> int:
    """``value`` as an int in ``[low, high]``, or a clear error (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}.{hint}", param=param)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidSettingError(f"{name} must be {bound}, got {value}.{hint}", param=param)
    return value


#: most sequences one loaded model decodes at once (engine.runtime.slots)
MAX_PARALLEL = 16


def check_load_settings(
    *, n_ctx: object, n_batch: object, max_draft_depth: object, n_threads: object = None, parallel: object = 1
) -> None:
    """Raise :class:`InvalidSettingError` for settings llama.cpp would abort on."""
    check_int("The number of parallel slots", parallel, 1, MAX_PARALLEL)
    check_int("The context length", n_ctx, MIN_CTX, hint=f" MTP Studio needs a context of at least {MIN_CTX} tokens.")
    check_int("The batch size", n_batch, 1, MAX_BATCH)
    check_int(
        "The maximum draft depth",
        max_draft_depth,
        0,
        MAX_DRAFT_DEPTH,
        hint=" Deeper drafts are almost never accepted; 'auto' picks the depth that pays.",
    )
    if n_threads is not None:
        check_int("The thread count", n_threads, 1, 1024)


def effective_ctx(requested: int, n_ctx_train: int) -> int:
    """The context to create: the request, capped at what the model was trained for
    (when the file says), never below :data:`MIN_CTX`."""
    n_ctx = requested
    if n_ctx_train > 0:
        n_ctx = min(n_ctx, n_ctx_train)
    return max(n_ctx, MIN_CTX)


def batch_for(n_batch: int, depth: int, n_ctx: int) -> int:
    """A batch size that holds a verify batch of ``depth + 1`` rows and the recurrent
    rollback tail (``n_rs_seq + 2``), within the context."""
    return min(max(n_batch, depth + 2), n_ctx)


def check_context_sizes(*, n_ubatch: int, n_batch: int, n_rs_seq: int, depth: int) -> None:
    """Check the sizes llama.cpp really uses (it clamps ``n_batch`` to the context and
    ``n_ubatch`` to ``n_batch``) before the first decode could assert on them."""
    need = max(depth + 1, n_rs_seq + 2 if n_rs_seq else 1)
    if n_ubatch < need or n_batch < need:
        raise ContextError(
            f"llama.cpp uses batches of {n_ubatch} tokens here, but draft depth {depth} needs {need}. "
            "Use a larger context or a smaller draft depth."
        )


# --------------------------------------------------------------- request values
# One checker per request value, used by every entry point (the endpoint checks before it
# queues a job, the engine when it resolves one): the ranges are written here only.


def check_max_tokens(value: object) -> int:
    """Most tokens a reply may have: 1 or more, from every entry point (an API that
    requires the field, as Anthropic's does, checks only that it is there)."""
    return check_int(
        "max_tokens",
        value,
        1,
        hint=" It is the most tokens the reply may have; leave it out for the default.",
        param="max_tokens",
    )


def check_stop(stop: object) -> tuple[str, ...]:
    """Stop strings within :data:`MAX_STOP_STRINGS` and :data:`MAX_STOP_CHARS`."""
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise InvalidSettingError("stop must be a string or a list of strings", param="stop")
    if len(stop) > MAX_STOP_STRINGS:
        raise InvalidSettingError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(stop)}", param="stop")
    for s in stop:
        if len(s) > MAX_STOP_CHARS:
            raise InvalidSettingError(
                f"a stop string may be at most {MAX_STOP_CHARS} characters, got one of {len(s)}", param="stop"
            )
    return tuple(stop)


def check_seed(seed: object) -> int | None:
    """A seed in ``[0, 2**64)``; ``None`` or ``-1`` for none."""
    if seed is None or (seed == -1 and not isinstance(seed, bool)):
        return None
    return check_int("seed", seed, 0, MAX_SEED, hint=" Use -1 or leave it out for a random seed.", param="seed")


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidSettingError(f"{name} must be a finite number, got {value!r}", param=name)
    return float(value)


def check_temperature(value: object) -> float:
    """0 (greedy) to 2."""
    t = _number("temperature", value)
    if not 0.0 <= t <= 2.0:
        raise InvalidSettingError(f"temperature must be between 0 and 2, got {value}", param="temperature")
    return t


def check_top_p(value: object) -> float:
    """In (0, 1]; 1 keeps the whole distribution."""
    p = _number("top_p", value)
    if not 0.0 < p <= 1.0:
        raise InvalidSettingError(f"top_p must be in (0, 1], got {value}", param="top_p")
    return p


def check_top_k(value: object) -> int:
    """0 (no limit) or more."""
    return check_int("top_k", value, 0, hint=" 0 means no top-k limit.", param="top_k")


def check_penalty(name: str, value: object) -> float:
    """``presence_penalty`` / ``frequency_penalty``: -2 to 2, as OpenAI's API allows."""
    v = _number(name, value)
    if not -2.0 <= v <= 2.0:
        raise InvalidSettingError(f"{name} must be between -2 and 2, got {value}", param=name)
    return v


def check_repeat_penalty(value: object) -> float:
    """llama.cpp's ``repeat_penalty``: above 0, at most 10 (1: off)."""
    v = _number("repeat_penalty", value)
    if not 0.0 < v <= 10.0:
        raise InvalidSettingError(
            f"repeat_penalty must be above 0 and at most 10 (1: off), got {value}", param="repeat_penalty"
        )
    return v


def check_top_logprobs(value: object) -> int:
    """Alternatives per token with its log-probability: 0 to :data:`MAX_TOP_LOGPROBS`."""
    return check_int("top_logprobs", value, 0, MAX_TOP_LOGPROBS, param="top_logprobs")


def check_flag(name: str, value: object) -> bool:
    """An on/off value: ``True`` or ``False`` (not a truthy string such as ``"false"``)."""
    if not isinstance(value, bool):
        raise InvalidSettingError(f"{name} must be true or false, got {value!r}", param=name)
    return value


#: what ``reasoning_format`` may be, and what each value means here: where a thinking
#: model's thinking goes. ``"auto"`` splits it from the content (the reply's reasoning,
#: ``reasoning_content`` in the chat API); ``"none"`` leaves it in the content, markers and
#: all. ``"deepseek"`` is llama-server's name for the split, which its ``"auto"`` also
#: means: it is taken as ``"auto"`` (the markers are the model's template's, whatever the
#: family). llama-server's ``"deepseek-legacy"`` (the thinking in both places) is refused.
REASONING_FORMATS = {"auto": "auto", "deepseek": "auto", "none": "none"}


def check_reasoning_format(value: object) -> str:
    """``"auto"`` or ``"none"`` (:data:`REASONING_FORMATS`: ``"deepseek"`` is ``"auto"``)."""
    if not isinstance(value, str) or value not in REASONING_FORMATS:
        raise InvalidSettingError(
            f"reasoning_format must be 'auto' (thinking apart from the content, in reasoning_content; "
            f"'deepseek' means the same) or 'none' (thinking left in the content), got {value!r}",
            param="reasoning_format",
        )
    return REASONING_FORMATS[value]


#: the largest thinking budget accepted (tokens)
MAX_THINKING_BUDGET = 1 << 20


def check_thinking_budget(value: object) -> int:
    """Most tokens a reply may think: 0 (answer at once) to :data:`MAX_THINKING_BUDGET`."""
    return check_int("thinking_budget_tokens", value, 0, MAX_THINKING_BUDGET, param="thinking_budget_tokens")
