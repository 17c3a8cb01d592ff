"""Checkpoint conversion: the original PyTorch code, HuggingFace's port and the authors' TensorFlow checkpoints
(read without TensorFlow), and the way back to the first two."""

from .original import (
    config_from_args,
    convert_checkpoint,
    convert_state_dict,
    export_checkpoint,
    export_state_dict,
    load_state_dict_file,
)
from .tf import convert_tf_checkpoint, load_tf_model
from .tf_checkpoint import TFCheckpoint, read_tf_checkpoint

__all__ = ["config_from_args", "convert_checkpoint", "convert_state_dict", "export_checkpoint", "export_state_dict",
           "load_state_dict_file", "convert_tf_checkpoint", "load_tf_model", "read_tf_checkpoint", "TFCheckpoint"]
