"""The rule for tests on real artefacts fetched from the package registry."""

from __future__ import annotations


def test_real_artefact_tests_skip_when_the_registry_is_unreachable_unless_ci_requires_them(monkeypatch):
    """Where MTP_STUDIO_REQUIRE_REAL=1 (CI sets it in .ci/run), a real-artefact test whose
    registry cannot be reached fails instead of skipping: a green CI run means they ran."""
    import pytest

    from tests.realmodels import REQUIRE_REAL_ENV, unreachable

    monkeypatch.delenv(REQUIRE_REAL_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception):
        unreachable("REAL-MODEL TESTS NOT RUN: offline")
    monkeypatch.setenv(REQUIRE_REAL_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="requires them"):
        unreachable("REAL-MODEL TESTS NOT RUN: offline")
    assert f"{REQUIRE_REAL_ENV}=1" in open(".ci/run").read()
