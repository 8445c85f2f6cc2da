"""The pytest plugin (entry point ``pytest11: gradoc``): the ``assert_finite`` fixture.

def test_encoding_is_finite(assert_finite):
    assert_finite(PositionalEncoding(64), (torch.randn(2, 16, 64), torch.tensor([16, 3])))
"""

from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def assert_finite() -> Callable[..., None]:
    from . import assert_finite as check

    return check
