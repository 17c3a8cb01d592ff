"""Fixtures of tests/hf: the python of the transformers-5 environment (see hf5_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf5_helpers import HF5_ENV, MAKE_HF5, hf5_python


@pytest.fixture(scope="session")
def hf5() -> Path:
    python = hf5_python()
    if python is None:
        pytest.skip(f"no transformers-5 environment (set {HF5_ENV}, or make one: {MAKE_HF5})")
    return python
