"""The ``txl`` command: one module per sub-command (``convert_command``, ``train_command``, ``eval_command``,
``plot_command``, ``generate_command``, ``score_command``, ``context_command``, ``bench_command``,
``export_command``, ``lm_eval_command``), each turning its arguments into typed settings for one library function
(most in :mod:`transformer_xl.jobs`); :mod:`.main` holds the parser and the guard that turns every failure into
one line and an exit status; :mod:`.options` the range checks and the shared options."""

from ..errors import ConfigError
from .main import build_parser, main, run_command
from .options import check_range

__all__ = ["ConfigError", "build_parser", "check_range", "main", "run_command"]
