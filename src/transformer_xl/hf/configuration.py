"""``TransfoXLConfig``: the ``config.json`` of HuggingFace's Transformer-XL, as transformers 5 reads configs.

The fields and defaults are those of transformers 4.35's ``TransfoXLConfig``, so every ``config.json`` written for
``TransfoXLLMHeadModel`` reads as it did; a few fields of this package's :class:`TransformerXLConfig` come on top,
with the values that reproduce HuggingFace (a folder of HuggingFace's that leaves them out gets these):

* ``tgt_len`` (128): the segment length of training and evaluation (HuggingFace ran whatever it was given as one
  segment; ``tgt_len`` matters to ``MemoryTrainer`` and to this package's own commands);
* ``ext_len`` (0), ``gating`` ("none"), ``gate_bias`` (2.0): this package's extended context and GTrXL gates;
* ``decoding`` ("sliding"): generation reads the prompt as one segment, then each token as a segment of its own;
* ``mem_init`` ("zeros"): a fresh start attends to ``mem_len`` zero states (HuggingFace's ``init_mems``);
  "empty" is the original PyTorch code's (no memory), which ``txl train`` runs use;
* ``same_length_extra`` (0): the ``same_length`` window of the PyTorch code and HuggingFace.

:meth:`TransfoXLConfig.to_txl` gives the :class:`TransformerXLConfig` the model is built from, through the one
mapping of HuggingFace's config (:func:`transformer_xl.checkpoints.layouts.config_from_hf`);
:meth:`TransfoXLConfig.from_txl` is the way back.
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from ..checkpoints.layouts import HF_DEFAULTS, config_from_hf, config_to_hf
from ..model.config import TransformerXLConfig

#: Fields of this package's config that HuggingFace's has not, with the values that reproduce HuggingFace.
TXL_FIELDS = {"tgt_len": 128, "ext_len": 0, "decoding": "sliding", "mem_init": "zeros", "same_length_extra": 0,
              "gating": "none", "gate_bias": 2.0}


class TransfoXLConfig(PreTrainedConfig):
    """HuggingFace's Transformer-XL configuration (transformers 4.35's fields and defaults: WikiText-103's model)
    and this package's conventions (module docstring). ``n_token``, ``hidden_size``, ``num_attention_heads`` and
    ``num_hidden_layers`` are aliases, as there. ``cutoffs=None`` means 4.35's ``[20000, 40000, 200000]``;
    ``d_embed=None`` means ``d_model``; ``tie_projs=None`` is derived from ``proj_share_all_but_first``."""

    model_type = "transfo-xl"
    keys_to_ignore_at_inference = ["mems"]  # the memory is state, not a prediction to gather in evaluation
    attribute_map = {"n_token": "vocab_size", "hidden_size": "d_model", "num_attention_heads": "n_head",
                     "num_hidden_layers": "n_layer"}

    vocab_size: int = HF_DEFAULTS["vocab_size"]
    cutoffs: list | None = None
    d_model: int = HF_DEFAULTS["d_model"]
    d_embed: int | None = HF_DEFAULTS["d_embed"]
    n_head: int = HF_DEFAULTS["n_head"]
    d_head: int = HF_DEFAULTS["d_head"]
    d_inner: int = HF_DEFAULTS["d_inner"]
    div_val: int = HF_DEFAULTS["div_val"]
    pre_lnorm: bool = HF_DEFAULTS["pre_lnorm"]
    n_layer: int = HF_DEFAULTS["n_layer"]
    mem_len: int = HF_DEFAULTS["mem_len"]
    clamp_len: int = HF_DEFAULTS["clamp_len"]
    same_length: bool = HF_DEFAULTS["same_length"]
    proj_share_all_but_first: bool = HF_DEFAULTS["proj_share_all_but_first"]
    attn_type: int = HF_DEFAULTS["attn_type"]
    sample_softmax: int = HF_DEFAULTS["sample_softmax"]
    adaptive: bool = HF_DEFAULTS["adaptive"]
    dropout: float | int = HF_DEFAULTS["dropout"]
    dropatt: float | int = HF_DEFAULTS["dropatt"]
    untie_r: bool = HF_DEFAULTS["untie_r"]
    init: str = HF_DEFAULTS["init"]
    init_range: float | int = HF_DEFAULTS["init_range"]
    proj_init_std: float | int = HF_DEFAULTS["proj_init_std"]
    init_std: float | int = HF_DEFAULTS["init_std"]
    layer_norm_epsilon: float | int = HF_DEFAULTS["layer_norm_epsilon"]
    tie_projs: list | None = None
    tie_word_embeddings: bool = True
    eos_token_id: int | list | None = 0
    pad_token_id: int | None = None
    # this package's conventions (TXL_FIELDS)
    tgt_len: int = TXL_FIELDS["tgt_len"]
    ext_len: int = TXL_FIELDS["ext_len"]
    decoding: str = TXL_FIELDS["decoding"]
    mem_init: str = TXL_FIELDS["mem_init"]
    same_length_extra: int = TXL_FIELDS["same_length_extra"]
    gating: str = TXL_FIELDS["gating"]
    gate_bias: float | int = TXL_FIELDS["gate_bias"]

    def __post_init__(self, **kwargs):
        if self.cutoffs is None:
            self.cutoffs = list(HF_DEFAULTS["cutoffs"])
        self.cutoffs = [int(c) for c in self.cutoffs]
        if self.d_embed is None:
            self.d_embed = self.d_model
        if self.tie_projs is None:  # as transformers 4.35 derives it
            self.tie_projs = [False] + [bool(self.proj_share_all_but_first)] * len(self.cutoffs)
        self.tgt_len = self.tgt_len or TXL_FIELDS["tgt_len"]  # an old config.json may say null
        super().__post_init__(**kwargs)

    # ------------------------------------------------------------------ this package's config
    def to_txl(self) -> TransformerXLConfig:
        """The :class:`TransformerXLConfig` of the model these fields describe (ConfigError naming a bad field)."""
        values = {k: getattr(self, k) for k in (*HF_DEFAULTS, "tie_projs", "tgt_len")}
        return config_from_hf(values).replace(**{k: getattr(self, k) for k in TXL_FIELDS})

    @classmethod
    def from_txl(cls, config: TransformerXLConfig, **kwargs) -> "TransfoXLConfig":
        """These fields for a model built from ``config`` (``kwargs``: more fields, e.g. ``name_or_path``)."""
        if config.d_input is not None:
            raise ValueError("d_input: a backbone for vectors has no HuggingFace face (token ids only)")
        values = config_to_hf(config)
        values.pop("model_type", None)
        values.pop("architectures", None)
        values.update({k: getattr(config, k) for k in TXL_FIELDS})
        return cls(**values, **kwargs)


__all__ = ["TXL_FIELDS", "TransfoXLConfig"]
