"""Model package: configuration, attention, adaptive softmax, the layer stack and its memory."""

from .config import RunLengths, TransformerXLConfig
from .memory import empty_mems, reset_mems, update_mems
from .transformer import TransformerXL, TransformerXLOutput

__all__ = ["RunLengths", "TransformerXL", "TransformerXLConfig", "TransformerXLOutput", "empty_mems", "reset_mems",
           "update_mems"]
