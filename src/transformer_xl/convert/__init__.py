"""Checkpoint conversion from the original Transformer-XL code and HuggingFace's port."""

from .original import (config_from_args, convert_checkpoint, convert_state_dict, export_state_dict,
                       load_state_dict_file)

__all__ = ["config_from_args", "convert_checkpoint", "convert_state_dict", "export_state_dict", "load_state_dict_file"]
