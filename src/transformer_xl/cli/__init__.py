"""The ``txl`` command: one module per sub-command (``convert``, ``train``, ``eval``, ``plot``, ``generate``,
``score``, ``context``, ``bench``), each a thin layer over the Python API; :mod:`.main` holds the parser and
the guard that turns every failure into one line and an exit status; :mod:`.options` the range checks."""

from ..errors import ConfigError
from .main import build_parser, main, run_command
from .options import check_range

__all__ = ["ConfigError", "build_parser", "check_range", "main", "run_command"]
