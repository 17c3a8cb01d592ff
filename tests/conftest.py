import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/helpers.py and tests/reference.py

pytest_plugins = ["data_fixtures"]  # the corpus and download-server fixtures (shared_cache, ptb, wt2, server)

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

try:  # the dev extra: property-based tests (hypothesis); without it they are skipped
    from hypothesis import HealthCheck, settings
except ImportError:
    pass
else:
    # A few examples each, the same ones every run (derandomize), nothing written to disk: seconds, not minutes.
    # TXL_HYPOTHESIS_PROFILE=thorough explores: many new examples per run.
    settings.register_profile("txl", max_examples=8, deadline=None, derandomize=True, database=None,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.register_profile("thorough", max_examples=200, deadline=None, database=None,
                              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    settings.load_profile(os.environ.get("TXL_HYPOTHESIS_PROFILE", "txl"))


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
