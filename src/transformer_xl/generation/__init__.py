"""Generation and scoring with exactly cached memory."""

from ..model.kv_cache import DecodingCache
from .generate import SegmentDecoder, generate
from .sampling import SamplingConfig

__all__ = ["DecodingCache", "SamplingConfig", "SegmentDecoder", "generate"]
