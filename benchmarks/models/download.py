"""Download throughput against the local fake Hub vs a plain `curl` of the same file,
and the bytes re-fetched by a resume. Prints figures; not a test.

The fake Hub runs in its own process, as a real server would: sharing this process's
GIL would slow the client being measured.

    python -m benchmarks.models.download [--size-mb 1024] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from engine.errors import Cancelled
from engine.hub.download import Target, download, partial_paths
from engine.hub.remote import HubConfig
from tests.engine.hub.fakehub import FakeHub, FakeHubServer


def _data(size_mb: int) -> bytes:
    return hashlib.sha256(b"seed").digest() * (1 << 15) * size_mb  # non-zero bytes


def serve(size_mb: int, rate_mbps: float) -> None:
    """Child process: serve one big file until stdin closes; report what was sent."""
    import json
    import sys

    from tests.engine.hub.fakehub import Fault

    hub = FakeHub()
    hub.add_repo("bench/Big-GGUF", {"big.gguf": _data(size_mb)})
    if rate_mbps:
        # the fake Hub sleeps per 64 KiB block: a link of rate_mbps megabits per second
        hub.faults["big.gguf"] = Fault(slow=(64 * 1024 * 8) / (rate_mbps * 1e6), times=10**9)
    with FakeHubServer(hub):
        print(hub.url, flush=True)
        for line in sys.stdin:
            if line.strip() == "log":
                print(json.dumps([[e.range, e.sent] for e in hub.gets("big.gguf")]), flush=True)


def main() -> int:
    import json
    import sys

    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--rate-mbps", type=float, default=0.0, help="limit the fake Hub's link (megabits/s); 0 = loopback speed"
    )
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.size_mb, a.rate_mbps)
        return 0
    data = _data(a.size_mb)
    sha = hashlib.sha256(data).hexdigest()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.models.download",
            "--serve",
            "--size-mb",
            str(a.size_mb),
            "--rate-mbps",
            str(a.rate_mbps),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = server.stdout.readline().strip()
    info = json.loads(
        subprocess.run(["curl", "-sf", f"{url}/api/models/bench/Big-GGUF"], capture_output=True, check=True).stdout
    )

    class _Repo:
        pass

    repo = _Repo()
    repo.sha = info["sha"]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        d = Path(tmp)
        cfg = HubConfig(url)
        f = _Repo()
        f.sha256 = sha
        t = Target("bench/Big-GGUF", "big.gguf", repo.sha, len(data), f.sha256)
        curl_s, ours_s, ours_verified_s = [], [], []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run(["curl", "-sf", "-o", str(d / "curl.bin"), f"{url}/cdn/{f.sha256}"], check=True)
            curl_s.append(time.perf_counter() - t0)
            (d / "curl.bin").unlink()
            marks = {}

            def progress(p, marks=marks):
                if p.done >= p.total and "end" not in marks:
                    marks["end"] = time.perf_counter()

            t0 = time.perf_counter()
            path = download(cfg, t, d / "dl", progress=progress)
            ours_verified_s.append(time.perf_counter() - t0)
            ours_s.append(marks["end"] - t0)
            path.unlink()
        # resume: cancel half way, resume, count the bytes the second request fetched
        cancel = threading.Event()

        def half(p):
            if p.done >= p.total // 2:
                cancel.set()

        try:
            download(cfg, t, d / "dl", progress=half, cancel=cancel)
        except Cancelled:
            pass
        part, _ = partial_paths(d / "dl", t)
        kept = part.stat().st_size
        download(cfg, t, d / "dl")
        server.stdin.write("log\n")
        server.stdin.flush()
        rng, sent = json.loads(server.stdout.readline())[-1]
        refetched = sent - (len(data) - kept)
        shutil.rmtree(d / "dl", ignore_errors=True)
    server.stdin.close()
    server.wait(10)
    mb = len(data) / 2**20
    c, o, v = statistics.median(curl_s), statistics.median(ours_s), statistics.median(ours_verified_s)
    link = f"a {a.rate_mbps:.0f} Mbit/s link" if a.rate_mbps else "loopback speed"
    print(f"file: {mb:.0f} MiB from the fake Hub on 127.0.0.1 at {link}, medians of {a.runs} runs")
    print(f"curl:                 {c:.2f} s  ({mb / c:.0f} MiB/s)")
    print(f"mtp-studio transfer:  {o:.2f} s  ({mb / o:.0f} MiB/s)  ratio vs curl {c / o:.2f}")
    print(f"  + SHA-256 verify:   {v:.2f} s  ({mb / v:.0f} MiB/s)  ratio vs curl {c / v:.2f}")
    print(f"resume after a cancel at {kept / 2**20:.0f} MiB: request 'Range: {rng}', bytes re-fetched: {refetched}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
