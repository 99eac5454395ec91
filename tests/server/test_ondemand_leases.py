"""Leases on models already loaded (engine.runtime.ondemand.residency): a request to one reads
no file and takes its lease on the event loop; only a load goes to a worker thread."""

from __future__ import annotations

import shutil

import httpx
import pytest

from engine.hub.library import Library
from engine.runtime.ondemand.residency import estimate_bytes
from tests.server.ondemandserving import ids as _ids, wait as _wait


@pytest.fixture(scope="module")
def library(fixtures, tmp_path_factory) -> Library:
    """A library of one chat model."""
    root = tmp_path_factory.mktemp("lease-lib")
    lib = Library(root / "models")
    copy = root / fixtures["partial"].path.name
    shutil.copyfile(fixtures["partial"].path, copy)
    lib.add([copy], name="Fixture Partial", provenance={"source": "import"})
    return lib


def test_a_request_to_a_loaded_model_reads_no_file(serve, library):
    """What a load would take (the file's header read: milliseconds of the GIL the engine
    thread waits for between its decodes) is worked out only when a load is needed."""
    estimated: list[str] = []

    def estimate(x, spec):
        estimated.append(x.name)
        return estimate_bytes(x, spec)

    s = serve(estimate=estimate)
    for _ in range(3):
        r = httpx.post(
            s.url + "/v1/completions", json={"model": "Fixture Partial", "prompt": "a", "max_tokens": 2}, timeout=60
        )
        assert r.status_code == 200
    assert len(estimated) == 1


def test_a_request_to_a_loaded_model_takes_its_lease_on_the_event_loop(serve, library):
    """Only a load (or a wait for one) goes to a worker thread: a loaded model's lease is
    taken at once, sparing each request a thread's round trip (on two busy cores, a few ms of
    its first token)."""
    s = serve()
    slow: list[str] = []
    acquire = s.residency.acquire
    s.residency.acquire = lambda name, **kw: (slow.append(name), acquire(name, **kw))[1]
    for name in ["Fixture Partial", *[_ids(library)["Fixture Partial"]] * 3]:  # then by the name /v1/models lists
        r = httpx.post(s.url + "/v1/completions", json={"model": name, "prompt": "a", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200
    assert slow == ["Fixture Partial"]  # the first request's load
    assert _wait(lambda: all(x.users == 0 for x in s.residency._residents.values()))  # every lease given back


# ------------------------------------------------------------------ room and time
