"""Talking to Hugging Face (or ``HF_ENDPOINT``) through ``huggingface_hub``: search,
repo listings, and reading a GGUF header with ranged requests before downloading.

The endpoint and offline mode are read at call time (huggingface_hub reads
``HF_ENDPOINT`` once, at import), and passed explicitly to every call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import PurePosixPath

from engine.errors import GGUFError, HubError, OfflineError, RepoNotFound
from engine.gguf.families import family
from engine.gguf.memory import ModelShape
from engine.gguf.pairing import HeaderFacts
from engine.gguf.reader import GGUFHeader, parse_buffer
from engine.hub.files import FileGroup, RemoteFile, group_gguf_files

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class HubConfig:
    endpoint: str
    token: str | None = None
    offline: bool = False

    @classmethod
    def from_env(cls, token: str | None = None, offline: bool | None = None) -> HubConfig:
        off = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") if offline is None else offline
        return cls(
            os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/"), token or os.environ.get("HF_TOKEN"), off
        )

    def __repr__(self) -> str:  # never show the token
        return f"HubConfig(endpoint={self.endpoint!r}, token={'set' if self.token else None}, offline={self.offline})"

    def api(self):
        if self.offline:
            raise OfflineError(
                "Offline mode: Hugging Face is not contacted; only models already in the library are used."
            )
        from huggingface_hub import HfApi

        return HfApi(endpoint=self.endpoint, token=self.token or False)


def translate(e: Exception, what: str) -> HubError:
    """huggingface_hub errors -> messages that say what to do."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )

    if isinstance(e, GatedRepoError):
        return HubError(f"{what}: this repo is gated; accept its terms on the Hub and set a token (HF_TOKEN).")
    if isinstance(e, RepositoryNotFoundError):
        return RepoNotFound(f"{what}: repository not found (or private: set a token).")
    if isinstance(e, HfHubHTTPError) and e.response is not None:
        return HubError(f"{what}: the Hub answered HTTP {e.response.status_code}.")
    return HubError(f"{what}: {type(e).__name__}: {e}")


@dataclass
class RepoHit:
    repo_id: str
    downloads: int
    likes: int
    updated: str | None


def search(cfg: HubConfig, query: str, limit: int = 30) -> list[RepoHit]:
    """GGUF repos matching ``query``, most downloaded first."""
    api = cfg.api()
    try:
        models = api.list_models(search=query, filter="gguf", sort="downloads", limit=limit)
        return [
            RepoHit(m.id, m.downloads or 0, m.likes or 0, m.last_modified.isoformat() if m.last_modified else None)
            for m in models
        ]
    except Exception as e:
        raise translate(e, f"search for {query!r}") from None


def resolve_revision(cfg: HubConfig, repo_id: str, revision: str | None = None) -> str:
    """The commit a branch or tag points to (downloads are pinned to it)."""
    api = cfg.api()
    try:
        return api.model_info(repo_id, revision=revision).sha or (revision or "main")
    except Exception as e:
        raise translate(e, repo_id) from None


def list_files(cfg: HubConfig, repo_id: str, revision: str) -> list[RemoteFile]:
    api = cfg.api()
    try:
        from huggingface_hub.hf_api import RepoFile

        out = []
        for item in api.list_repo_tree(repo_id, revision=revision, recursive=True, expand=True):
            if isinstance(item, RepoFile):
                out.append(RemoteFile(item.path, item.size, item.lfs.sha256 if item.lfs else None, item.blob_id))
        return out
    except Exception as e:
        raise translate(e, repo_id) from None


def list_gguf(cfg: HubConfig, repo_id: str, revision: str | None = None) -> tuple[str, list[FileGroup]]:
    rev = resolve_revision(cfg, repo_id, revision)
    return rev, group_gguf_files(list_files(cfg, repo_id, rev))


def _remote_header_parts(cfg: HubConfig, repo_id: str, path: str, revision: str, *, max_bytes: int = 64 << 20):
    """A remote GGUF header parsed from ranged GETs (1 MiB, growing as needed):
    (kvs, tensors, header end)."""
    h = remote_gguf_header(cfg, repo_id, path, revision, max_bytes=max_bytes)
    return h.kv_list, h.tensors, h.header_end


def remote_gguf_header(
    cfg: HubConfig, repo_id: str, path: str, revision: str, *, max_bytes: int = 64 << 20
) -> GGUFHeader:
    """A remote GGUF's header, parsed from ranged GETs (1 MiB, growing as needed), as
    :func:`engine.gguf.reader.read_header` gives a local one (``file_size``: the size the
    server states)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import (
        build_hf_headers,
        hf_raise_for_status,
        http_backoff,
    )

    cfg.api()  # offline check
    url = hf_hub_url(repo_id, path, revision=revision, endpoint=cfg.endpoint)
    want = 1 << 20
    while True:
        headers = build_hf_headers(token=cfg.token or False)
        headers["Range"] = f"bytes=0-{want - 1}"
        try:
            r = http_backoff("GET", url, headers=headers, follow_redirects=True)
            hf_raise_for_status(r)
        except Exception as e:
            raise translate(e, f"{repo_id}/{path}") from None
        data = r.content
        try:
            version, kvs, tensors, end = parse_buffer(data, len(data), path)
        except GGUFError as e:
            if e.code == "truncated" and len(data) >= want and want < max_bytes:
                want *= 4
                continue
            raise
        total = r.headers.get("Content-Range", "").rpartition("/")[2]
        size = int(total) if total.isdigit() else len(data)
        return GGUFHeader(PurePosixPath(path), version, kvs, tensors, end, size, bytes(data[:end]))


def remote_shape(cfg: HubConfig, repo_id: str, group: FileGroup, revision: str) -> ModelShape:
    """The memory shape (engine.gguf.memory) of a remote model, from the headers of all
    its shards: the same figures a downloaded copy gives."""
    keys: dict = {}
    sizes: list[tuple[str, int]] = []
    for i, f in enumerate(group.files):
        kvs, tensors, _ = _remote_header_parts(cfg, repo_id, f.path, revision)
        if i == 0:
            keys = {kv.key: kv for kv in kvs}
        sizes += [(t.name, t.nbytes) for t in tensors]

    return ModelShape.from_kvs(keys, sizes)


def read_remote_header(
    cfg: HubConfig, repo_id: str, path: str, revision: str, *, max_bytes: int = 64 << 20
) -> HeaderFacts:
    """Parse a remote GGUF header with ranged GETs (1 MiB, doubling as needed) and
    summarize what matters before downloading: architecture, context, NextN layers."""
    kvs, tensors, end = _remote_header_parts(cfg, repo_id, path, revision, max_bytes=max_bytes)
    keys = {kv.key: kv for kv in kvs}
    arch_kv = keys.get("general.architecture")
    arch = arch_kv.value if arch_kv is not None else None

    def get(key):
        kv = keys.get(key)
        return kv.value if kv is not None and kv.type != 9 else None

    nextn = get(f"{arch}.nextn_predict_layers") or 0
    has_trunk = any(t.name == "blk.0.attn_norm.weight" for t in tensors)
    fam = family(arch)
    if not nextn:
        mtp = "none"
    elif fam is not None and fam.ships == "assistant":
        mtp = "assistant"
    elif has_trunk and not any(".nextn." in t.name for t in tensors):
        mtp = "trunk-only"
    else:
        mtp = "integrated" if has_trunk else "head-only"
    return HeaderFacts(
        architecture=arch,
        name=get("general.name"),
        context_length=get(f"{arch}.context_length"),
        embedding_length=get(f"{arch}.embedding_length"),
        block_count=get(f"{arch}.block_count"),
        nextn_layers=nextn,
        embedding_length_out=get(f"{arch}.embedding_length_out"),
        mtp=mtp,
        vocab_size=keys["tokenizer.ggml.tokens"].count if "tokenizer.ggml.tokens" in keys else None,
        tensor_names=tuple(t.name for t in tensors),
        header_bytes=end,
    )
