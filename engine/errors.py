"""Every error the engine raises on purpose, in one place.

Each error's message says what is wrong and what to do about it. They are turned into
user text in exactly one place in ``app/`` and into OpenAI-style JSON in exactly one
place in ``engine/server/``; nothing maps errors by matching message text.
Built-in bases are kept where natural so generic handlers still work.
"""

from __future__ import annotations


class MtpStudioError(Exception):
    """Base class of all deliberate engine errors."""

    #: short machine-readable code (server JSON, CLI --json, GUI)
    code: str = "error"


class Cancelled(MtpStudioError):
    """Raised inside long work when its cancel event is set. Cancelling is not an
    error: callers catch this and report a quiet "cancelled" outcome."""

    code = "cancelled"


# --------------------------------------------------------------------------- models
class ModelFileError(MtpStudioError, ValueError):
    """A model file is missing, unreadable or not a valid GGUF."""

    code = "invalid_model_file"


class ModelNotFoundError(ModelFileError, FileNotFoundError):
    code = "model_not_found"


class ModelLoadError(MtpStudioError, RuntimeError):
    """llama.cpp refused to load a file that passed validation."""

    code = "model_load_failed"


class MtpUnavailableError(MtpStudioError, ValueError):
    """MTP was asked for but the model (or head) cannot provide it."""

    code = "mtp_unavailable"


class HeadMismatchError(MtpUnavailableError):
    """An external MTP head does not belong to the target model."""

    code = "head_mismatch"


# ------------------------------------------------------------------------- runtime
class ContextError(MtpStudioError, RuntimeError):
    """A llama.cpp context could not be created."""

    code = "context_failed"


class DecodeError(MtpStudioError, RuntimeError):
    """llama_decode failed (e.g. the KV cache is full)."""

    code = "decode_failed"


class PromptTooLongError(MtpStudioError, ValueError):
    """The prompt does not fit the context; never truncated silently."""

    code = "context_length_exceeded"

    def __init__(self, n_prompt: int, n_ctx: int):
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx
        super().__init__(
            f"The prompt is {n_prompt} tokens but the context holds {n_ctx}. "
            "Shorten the prompt or load the model with a larger context."
        )


class InvalidRequestError(MtpStudioError, ValueError):
    """Bad generation parameters. ``param`` names the request field at fault (the HTTP
    error's ``param``), when there is one."""

    code = "invalid_request"

    def __init__(self, message: str = "", *, param: str | None = None):
        super().__init__(message)
        self.param = param


class InvalidSettingError(InvalidRequestError):
    """A load or decode setting llama.cpp cannot work with (it would assert and end
    the process), caught before llama.cpp sees it."""

    code = "invalid_setting"


class InsufficientMemoryError(ModelLoadError):
    """A load whose memory estimate exceeds what this machine has free: refused before
    anything is allocated (engine.runtime.load.fit). ``fit`` holds the assessment."""

    code = "insufficient_memory"

    def __init__(self, message: str, fit: dict | None = None):
        super().__init__(message)
        self.fit = fit or {}


class NativeCrashError(ModelLoadError):
    """llama.cpp crashed or aborted on this file in a child process, and no known-safe
    setting avoided it. The app itself did not crash."""

    code = "native_crash"


class EngineStoppedError(MtpStudioError, RuntimeError):
    code = "engine_stopped"


class QueueFullError(MtpStudioError, RuntimeError):
    """The engine's job queue is at capacity."""

    code = "queue_full"


class NoModelLoadedError(MtpStudioError, LookupError):
    code = "model_not_loaded"


# ---------------------------------------------------------------------------- gguf
class GGUFError(ModelFileError):
    """Structural problem in a GGUF file. ``offset`` is the byte offset where the
    problem was found, when known."""

    code = "invalid_gguf"

    def __init__(self, message: str, *, file: str | None = None, offset: int | None = None, code: str | None = None):
        self.file = file
        self.offset = offset
        if code:
            self.code = code
        where = []
        if file:
            where.append(file)
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.bare_message = message


class ComposeError(MtpStudioError, ValueError):
    """A target and head cannot be composed (with the reason)."""

    code = "compose_failed"

    def __init__(self, message: str, *, code: str | None = None):
        if code:
            self.code = code
        super().__init__(message)


class DiskSpaceError(MtpStudioError, OSError):
    code = "insufficient_disk_space"

    def __init__(self, needed: int, available: int, where: str):
        self.needed = needed
        self.available = available
        super().__init__(
            f"Not enough disk space in {where}: need {needed / 2**20:.1f} MiB, "
            f"{available / 2**20:.1f} MiB free. Free some space or choose another folder."
        )


# ------------------------------------------------ raised by one subsystem each
class LibraryError(MtpStudioError, LookupError):
    """The model library (engine.hub.library) cannot do what was asked."""

    code = "library_error"


class HubError(MtpStudioError, RuntimeError):
    """Talking to the Hugging Face Hub failed."""

    code = "hub_error"


class OfflineError(HubError):
    """The Hub cannot be reached."""

    code = "offline"


class RepoNotFound(HubError, LookupError):
    """No such repository (or no access to it)."""

    code = "repo_not_found"


class ChecksumError(HubError):
    """A downloaded file does not match the Hub's checksum."""

    code = "checksum_mismatch"


class ProjectorMismatchError(MtpStudioError, ValueError):
    """A multimodal projector (mmproj) does not fit the model it was meant for (its output
    width is not the model's input width), or is not a projector at all: refused before
    anything is downloaded or loaded."""

    code = "projector_mismatch"


class UnsafePathError(HubError):
    """A Hub listing named a file, repo or revision that would leave its folder."""

    code = "unsafe_remote_path"


class BuildError(MtpStudioError, RuntimeError):
    """Building a llama.cpp backend failed."""

    code = "backend_build_failed"


class BadSettingsFile(ValueError):
    """The settings file cannot be used at all (not JSON, or JSON of the wrong shape)."""


class PairingError(HeadMismatchError):
    """The head does not fit the target; ``code`` says which rule failed."""

    def __init__(self, message: str, *, code: str):
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- rpc
class RpcError(MtpStudioError, RuntimeError):
    """Remote devices (llama.cpp's RPC backend) cannot be used as asked."""

    code = "rpc_error"


class RpcUnavailableError(RpcError):
    """The llama.cpp build in use was compiled without the RPC backend."""

    code = "rpc_unavailable"


class RpcUnreachableError(RpcError):
    """An RPC server did not answer."""

    code = "rpc_unreachable"


class RpcConnectionLostError(RpcError):
    """A remote device went away while a model used it; the model was unloaded and can be
    loaded again once the server is back."""

    code = "rpc_connection_lost"


class RpcBusyError(RpcUnreachableError):
    """An RPC server is serving another client (llama.cpp's serves one at a time)."""

    code = "rpc_busy"


class RpcVersionError(RpcError):
    """An RPC server speaks another protocol version (llama.cpp would abort on it)."""

    code = "rpc_version_mismatch"
