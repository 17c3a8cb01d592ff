"""Training: run configuration, optimiser and schedules, checkpoints, metrics and the loop."""

from .loop import Trainer, TrainResult, train
from .run_config import (
    DataConfig,
    EvalConfig,
    ModelSection,
    RunConfig,
    TrainConfig,
    load_run_config,
    run_config_from_dict,
)

__all__ = ["DataConfig", "EvalConfig", "ModelSection", "RunConfig", "TrainConfig", "Trainer", "TrainResult",
           "load_run_config",
           "run_config_from_dict", "train"]
