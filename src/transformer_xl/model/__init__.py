"""Model package: configuration, attention, adaptive softmax, the layer stack and its memory (the backbone), and the
language model on top."""

from .backbone import BackboneOutput, MemoryState, TransformerXLBackbone
from .config import RunLengths, TransformerXLConfig
from .gating import GRUGate
from .memory import empty_mems, reset_mems, update_mems
from .transformer import TransformerXL, TransformerXLOutput

__all__ = ["BackboneOutput", "GRUGate", "MemoryState", "RunLengths", "TransformerXL", "TransformerXLBackbone",
           "TransformerXLConfig", "TransformerXLOutput", "empty_mems", "reset_mems", "update_mems"]
