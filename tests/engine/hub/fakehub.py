"""A local fake Hugging Face Hub over real HTTP, for the real ``huggingface_hub`` client.

It implements the endpoints the client calls for search, repo info, trees, paths-info
and file resolve/download (HEAD and GET, 302 to a CDN path like the Hub's LFS files,
Range requests, ETag / X-Linked-Etag / X-Linked-Size / X-Repo-Commit), serves real GGUF
files, logs every request, and injects faults on demand: a connection dropped
mid-file, a 500, a 429 with Retry-After, bytes that do not match the SHA-256, a slow
stream, a missing shard.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class RepoFile:
    data: bytes
    sha256: str
    blob_id: str

    @classmethod
    def of(cls, data: bytes) -> RepoFile:
        blob = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
        return cls(data, hashlib.sha256(data).hexdigest(), blob)

    @property
    def lfs(self) -> bool:
        return len(self.data) > 1024


@dataclass
class Repo:
    sha: str
    files: dict[str, RepoFile]
    downloads: int = 0


@dataclass
class Fault:
    """Applied to GETs of one file's bytes, each at most ``times`` times."""

    drop_after: int | None = None  # close the connection after this many body bytes
    status: int | None = None  # answer with this status instead
    retry_after: int | None = None
    corrupt: bool = False  # flip a byte in what is served (the SHA-256 will not match)
    slow: float = 0.0  # seconds to sleep per 64 KiB
    ignore_range: bool = False  # answer a Range request with 200 and the whole file (some CDNs do)
    times: int = 1


@dataclass
class Logged:
    method: str
    path: str
    range: str | None
    status: int
    sent: int
    t: float
    file: str | None = None  # the repo file whose bytes were served


@dataclass
class FakeHub:
    repos: dict[str, Repo] = field(default_factory=dict)
    faults: dict[str, Fault] = field(default_factory=dict)  # key: file path inside the repo
    log: list[Logged] = field(default_factory=list)
    url: str = ""

    def add_repo(self, repo_id: str, files: dict[str, bytes | Path], downloads: int = 0) -> Repo:
        data = {k: RepoFile.of(v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()}
        sha = hashlib.sha1(repo_id.encode() + b"".join(f.sha256.encode() for f in data.values())).hexdigest()
        repo = Repo(sha, data, downloads)
        self.repos[repo_id] = repo
        return repo

    def body_bytes(self, file: str) -> int:
        """Body bytes of ``file`` sent by GETs so far."""
        return sum(e.sent for e in self.log if e.method == "GET" and e.file == file)

    def gets(self, file: str) -> list[Logged]:
        return [e for e in self.log if e.method == "GET" and e.file == file]


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    # --------------------------------------------------------------- helpers
    def _send(
        self,
        status: int,
        body: bytes = b"",
        headers: dict | None = None,
        *,
        head: bool = False,
        file: str | None = None,
    ) -> None:
        self.send_response(status)
        h = {"Content-Length": str(len(body)), **(headers or {})}
        for k, v in h.items():
            self.send_header(k, v)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)
        self.hub.log.append(
            Logged(
                self.command,
                self.path,
                self.headers.get("Range"),
                status,
                0 if head else len(body),
                time.monotonic(),
                file,
            )
        )

    def _json(self, obj, status: int = 200) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, code: str, message: str, *, head: bool = False) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(
            status,
            body,
            {"Content-Type": "application/json", "X-Error-Code": code, "X-Error-Message": message},
            head=head,
        )

    def _repo(self, repo_id: str) -> Repo | None:
        return self.hub.repos.get(repo_id)

    @staticmethod
    def _tree_item(path: str, f: RepoFile) -> dict:
        item = {"type": "file", "oid": f.blob_id, "size": len(f.data), "path": path}
        if f.lfs:
            item["lfs"] = {"oid": f.sha256, "size": len(f.data), "pointerSize": 134}
        return item

    # ---------------------------------------------------------------- routes
    def do_GET(self):
        self._route(head=False)

    def do_HEAD(self):
        self._route(head=True)

    def do_POST(self):
        u = urlparse(self.path)
        m = re.fullmatch(r"/api/models/(.+)/paths-info/([^/]+)", u.path)
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode())
        if not m:
            return self._error(404, "EntryNotFound", "no such route")
        repo = self._repo(unquote(m.group(1)))
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found")
        items = [self._tree_item(p, repo.files[p]) for p in form.get("paths", []) if p in repo.files]
        self._json(items)

    def _route(self, head: bool):
        u = urlparse(self.path)
        q = parse_qs(u.query)
        path = unquote(u.path)
        if path == "/api/models":
            search = (q.get("search") or [""])[0].lower()
            limit = int((q.get("limit") or ["100"])[0])
            hits = sorted(
                ((rid, r) for rid, r in self.hub.repos.items() if search in rid.lower()), key=lambda x: -x[1].downloads
            )
            return self._json(
                [
                    {
                        "id": rid,
                        "modelId": rid,
                        "downloads": r.downloads,
                        "likes": 3,
                        "tags": ["gguf"],
                        "private": False,
                        "lastModified": "2026-11-01T00:00:00.000Z",
                    }
                    for rid, r in hits[:limit]
                ]
            )
        m = re.fullmatch(r"/api/models/(.+?)(?:/revision/([^/]+))?", path)
        if m and "/tree/" not in path:
            repo = self._repo(m.group(1))
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found", head=head)
            return self._json(
                {
                    "id": m.group(1),
                    "modelId": m.group(1),
                    "sha": repo.sha,
                    "private": False,
                    "siblings": [{"rfilename": p} for p in repo.files],
                }
            )
        m = re.fullmatch(r"/api/models/(.+)/tree/([^/]+)(/.*)?", path)
        if m:
            repo = self._repo(m.group(1))
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            return self._json([self._tree_item(p, f) for p, f in sorted(repo.files.items())])
        m = re.fullmatch(r"/(.+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self._resolve(m.group(1), m.group(2), m.group(3), head)
        m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        if m:
            return self._cdn(m.group(1), head)
        self._error(404, "EntryNotFound", f"no route {path}", head=head)

    def _resolve(self, repo_id: str, rev: str, fpath: str, head: bool):
        repo = self._repo(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound", "Repository not found", head=head)
        if rev not in (repo.sha, "main"):
            return self._error(404, "RevisionNotFound", "Revision not found", head=head)
        f = repo.files.get(fpath)
        if f is None:
            return self._error(404, "EntryNotFound", f"{fpath} does not exist", head=head)
        common = {"X-Repo-Commit": repo.sha, "ETag": f'"{f.blob_id}"'}
        if f.lfs:
            headers = {
                **common,
                "X-Linked-Etag": f'"{f.sha256}"',
                "X-Linked-Size": str(len(f.data)),
                "Location": f"/cdn/{f.sha256}",
            }
            return self._send(302, b"", headers, head=head)
        self._serve(fpath, f, head, common)

    def _cdn(self, sha: str, head: bool):
        for repo in self.hub.repos.values():
            for p, f in repo.files.items():
                if f.sha256 == sha:
                    return self._serve(p, f, head, {"ETag": f'"{sha}"'})
        self._error(404, "EntryNotFound", "no such blob", head=head)

    def _serve(self, fpath: str, f: RepoFile, head: bool, headers: dict):
        data = f.data
        fault = self.hub.faults.get(fpath)
        if not head and fault is not None and fault.times > 0:
            if fault.status is not None:
                fault.times -= 1
                extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
                body = json.dumps({"error": f"injected {fault.status}"}).encode()
                return self._send(fault.status, body, {"Content-Type": "application/json", **extra}, file=fpath)
            if fault.corrupt:
                fault.times -= 1
                data = bytearray(data)
                data[len(data) // 2] ^= 0xFF
                data = bytes(data)
        start, end, status = 0, len(data) - 1, 200
        rng = self.headers.get("Range")
        honoured = None if (fault is not None and fault.ignore_range and not head) else rng
        if honoured:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", honoured.strip())
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)) if m.group(2) else len(data) - 1, len(data) - 1)
                status = 206
        if start > end and len(data):
            return self._send(416, b"", {"Content-Range": f"bytes */{len(data)}"}, head=head)
        body = data[start : end + 1]
        hdrs = {
            **headers,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Length": str(len(body)),
        }
        if status == 206:
            hdrs["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.send_response(status)
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        sent = 0
        if not head:
            drop = fault.drop_after if (fault is not None and fault.times > 0) else None
            step = 64 << 10
            try:
                for i in range(0, len(body), step):
                    chunk = body[i : i + step]
                    if drop is not None and sent + len(chunk) > drop:
                        chunk = chunk[: max(0, drop - sent)]
                        self.wfile.write(chunk)
                        sent += len(chunk)
                        fault.times -= 1
                        self.wfile.flush()
                        self.close_connection = True
                        self.connection.shutdown(2)
                        break
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    if fault is not None and fault.slow:
                        time.sleep(fault.slow)
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass
        self.hub.log.append(Logged(self.command, self.path, rng, status, sent, time.monotonic(), fpath))


class FakeHubServer:
    def __init__(self, hub: FakeHub):
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        hub.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.hub = hub
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self.hub

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
