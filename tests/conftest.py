import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/helpers.py and tests/reference.py

pytest_plugins = ["data_fixtures"]  # the corpus and download-server fixtures (shared_cache, ptb, wt2, server)

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield
