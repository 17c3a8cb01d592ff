import pytest


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A corpus cache shared by the runs of one test module."""
    return tmp_path_factory.mktemp("cache")
