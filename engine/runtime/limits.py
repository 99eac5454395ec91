"""Guards for the settings that make llama.cpp assert instead of returning an error.

llama.cpp ends the whole process (``GGML_ASSERT``) on some settings it accepts at
context creation: a context of a few tokens, or recurrent rollback snapshots
(``n_rs_seq``, the draft depth) that do not fit the micro-batch it really uses
(``n_ubatch > n_keep_tail``). Every entry point (GUI, CLI, server, settings file) builds
a :class:`~engine.runtime.loader.LoadSpec`, and every spec goes through
:func:`check_load_settings` before llama.cpp sees it; a context is then checked again
with the sizes llama.cpp reports back (:func:`check_context_sizes`).
"""

from __future__ import annotations

from engine.errors import ContextError, InvalidSettingError

#: smallest context MTP Studio creates: a chat template alone takes tens of tokens
MIN_CTX = 64
#: deepest draft any setting may ask for; auto depth stays within ``max_draft_depth``
MAX_DRAFT_DEPTH = 16
#: largest batch a context is created with (llama.cpp clamps it to the context anyway)
MAX_BATCH = 8192


def check_int(name: str, value: object, low: int, high: int | None = None, *, hint: str = "") -> int:
    """``value`` as an int in ``[low, high]``, or a clear error (bools are not ints here)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSettingError(f"{name} must be a whole number, got {value!r}.{hint}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidSettingError(f"{name} must be {bound}, got {value}.{hint}")
    return value


def check_load_settings(*, n_ctx: object, n_batch: object, max_draft_depth: object, n_threads: object = None) -> None:
    """Raise :class:`InvalidSettingError` for settings llama.cpp would abort on."""
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
