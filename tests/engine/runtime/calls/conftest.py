"""What the call families' tests share: the demo model's vocabulary, loaded once for all of
them (the grammar tests drive a random model over it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def vocab():
    from tests.callharness import demo_vocab

    return demo_vocab()
