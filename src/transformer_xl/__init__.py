"""transformer-xl: Transformer-XL language models (Dai et al., 2019).

``from transformer_xl import TransformerXL, TransformerXLTokenizer, generate_text`` is all a former HuggingFace
user needs::

    model = TransformerXL.from_pretrained("transfo-xl/transfo-xl-wt103")       # a hub id, a folder or a run
    tokenizer = TransformerXLTokenizer.from_pretrained("transfo-xl/transfo-xl-wt103")
    print(generate_text(model, tokenizer, "The castle was built in", max_new_tokens=40))

``open_checkpoint`` opens both at once (and knows the run); ``generate`` works on token ids.
``TransformerXLBackbone`` is the layer stack with its memory for any sequence (vectors in, hidden states out,
episode boundaries); ``transformer_xl.rl`` trains agents on it. Sub-packages hold the rest: ``data`` (corpora,
vocabularies), ``training``, ``evaluation``, ``generation`` and ``convert``.

The names load on first use: ``import transformer_xl`` imports neither torch nor a sub-package, so that the
``txl`` command (:mod:`transformer_xl.cli`) answers Ctrl-C in one line even while torch is still importing.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any, List

from . import hooks as _hooks
from .version import __version__

# What the model layer's from_pretrained calls, named before any module of the package can be imported.
_hooks.provide("open_model", "transformer_xl.checkpoints.loading:open_model")

#: Each public name and the module it is read from on first use.
_HOMES = {
    "locate": "checkpoints",
    "score_text": "evaluation.score",
    "generate": "generation",
    "generate_text": "generation.text",
    "TransformerXL": "model",
    "TransformerXLBackbone": "model",
    "TransformerXLConfig": "model",
    "Checkpoint": "pretrained",
    "open_checkpoint": "pretrained",
    "push_to_hub": "pretrained",
    "TransformerXLTokenizer": "text.tokenizer",
}

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from .checkpoints import locate
    from .evaluation.score import score_text
    from .generation import generate
    from .generation.text import generate_text
    from .model import TransformerXL, TransformerXLBackbone, TransformerXLConfig
    from .pretrained import Checkpoint, open_checkpoint, push_to_hub
    from .text.tokenizer import TransformerXLTokenizer


def __getattr__(name: str) -> Any:
    """A public name, imported from its home the first time it is asked for; a sub-package by its name
    (``transformer_xl.data``) as an eager package would have it."""
    if name in _HOMES:
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = ["Checkpoint", "TransformerXL", "TransformerXLBackbone", "TransformerXLConfig", "TransformerXLTokenizer",
           "__version__", "generate",
           "generate_text", "locate", "open_checkpoint", "push_to_hub", "score_text"]
