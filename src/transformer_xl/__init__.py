"""transformer-xl: Transformer-XL language models (Dai et al., 2019).

``from transformer_xl import TransformerXL, TransformerXLConfig, generate`` is the model and its decoding; sub-packages
hold the rest:
``data`` (corpora, vocabularies), ``training``, ``evaluation``, ``generation`` and ``convert``.
"""

__version__ = "0.1.0"

from .model import TransformerXL, TransformerXLConfig  # noqa: E402  (model.io reads __version__)
from .generation import generate  # noqa: E402

__all__ = ["TransformerXL", "TransformerXLConfig", "__version__", "generate"]
