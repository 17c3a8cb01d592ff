"""Generation and scoring with exactly cached memory."""

from .decoding_cache import DecodingCache
from .generate import SegmentDecoder, generate
from .sampling import SamplingConfig

__all__ = ["DecodingCache", "SamplingConfig", "SegmentDecoder", "generate"]
