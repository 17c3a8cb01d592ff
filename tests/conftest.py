import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/helpers.py and tests/reference.py

from helpers import TEST_THREADS

pytest_plugins = ["data_fixtures"]  # the corpus and download-server fixtures (shared_cache, ptb, wt2, server)

torch.set_num_threads(TEST_THREADS)  # helpers.TEST_THREADS: a share of the cores per pytest-xdist worker
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):  # and of the commands the tests start
        os.environ.setdefault(name, str(TEST_THREADS))

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
    if torch.get_num_threads() != TEST_THREADS:  # a run in this process set its own (--num-threads, txl rl)
        torch.set_num_threads(TEST_THREADS)
