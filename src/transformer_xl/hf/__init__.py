"""transformers 5 on this package's model: ``import transformer_xl.hf`` makes the model type ``"transfo-xl"`` known to
``AutoConfig``, ``AutoModel``, ``AutoModelForCausalLM`` and ``AutoTokenizer``, so code written for HuggingFace's
``TransfoXLLMHeadModel`` (removed in transformers 5.0) runs again::

    import transformer_xl.hf
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    model = AutoModelForCausalLM.from_pretrained("transfo-xl/transfo-xl-wt103")   # a hub id or a folder
    tok = AutoTokenizer.from_pretrained("transfo-xl/transfo-xl-wt103")            # vocab.pkl, never unpickled
    out = model(input_ids=ids, labels=ids, mems=mems)   # out.losses [B, L-1], out.loss, out.mems

The classes are a face: each holds a :class:`~transformer_xl.model.TransformerXL` (or the backbone) and hands it
the work, so every number is the model's own (it reproduces transformers 4.35.2 to 1e-6). What works and what does
not: docs/TRANSFORMERS.md.

* :mod:`.configuration`: ``TransfoXLConfig``, transformers 4.35's fields plus this package's conventions.
* :mod:`.modeling`: ``TransfoXLLMHeadModel`` (``generate`` with the memory carried), ``TransfoXLModel``.
* :mod:`.tokenization`: ``TransfoXLTokenizer`` over :class:`~transformer_xl.text.TransformerXLTokenizer`.
* :mod:`.memory_trainer`: ``MemoryTrainer`` (a ``Trainer`` that feeds each batch the memory of the one before)
  and ``StreamSegments``, the dataset it reads.

Needs the ``transformers`` extra (transformers >= 5); without it the import is one line.
"""

from __future__ import annotations

from importlib import metadata

from ..errors import MissingExtraError, missing_extra

EXTRA = "transformers"


def _check_transformers() -> None:
    """One :class:`MissingExtraError` line unless transformers 5.x is installed (checked without importing it)."""
    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        raise missing_extra("transformers (>= 5)", EXTRA) from None
    major = version.split(".", 1)[0]
    if not major.isdigit() or int(major) < 5:
        raise MissingExtraError(f'transformer_xl.hf needs transformers >= 5 (this is {version}): '
                                f'pip install "transformer-xl[{EXTRA}]"')


_check_transformers()

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from .configuration import TransfoXLConfig  # noqa: E402
from .memory_trainer import MemoryTrainer, StreamSegments, txl_optimizers  # noqa: E402
from .modeling import (  # noqa: E402
    TransfoXLLMHeadModel,
    TransfoXLLMHeadModelOutput,
    TransfoXLModel,
    TransfoXLModelOutput,
    TransfoXLPreTrainedModel,
)
from .tokenization import TransfoXLTokenizer  # noqa: E402


def register() -> None:
    """Make ``"transfo-xl"`` known to the Auto classes (done on import; calling it again changes nothing)."""
    AutoConfig.register(TransfoXLConfig.model_type, TransfoXLConfig, exist_ok=True)
    AutoModel.register(TransfoXLConfig, TransfoXLModel, exist_ok=True)
    AutoModelForCausalLM.register(TransfoXLConfig, TransfoXLLMHeadModel, exist_ok=True)
    AutoTokenizer.register(TransfoXLConfig, tokenizer_class=TransfoXLTokenizer, exist_ok=True)


register()

__all__ = ["MemoryTrainer", "StreamSegments", "TransfoXLConfig", "TransfoXLLMHeadModel",
           "TransfoXLLMHeadModelOutput", "TransfoXLModel", "TransfoXLModelOutput", "TransfoXLPreTrainedModel",
           "TransfoXLTokenizer", "register", "txl_optimizers"]
