"""transformer-xl: Transformer-XL language models (Dai et al., 2019)."""

__version__ = "0.1.0"
