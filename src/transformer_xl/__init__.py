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
"""

from .checkpoints import locate
from .evaluation.score import score_text
from .generation import generate
from .generation.text import generate_text
from .model import TransformerXL, TransformerXLBackbone, TransformerXLConfig
from .pretrained import Checkpoint, open_checkpoint, push_to_hub
from .text.tokenizer import TransformerXLTokenizer
from .version import __version__

__all__ = ["Checkpoint", "TransformerXL", "TransformerXLBackbone", "TransformerXLConfig", "TransformerXLTokenizer",
           "__version__", "generate",
           "generate_text", "locate", "open_checkpoint", "push_to_hub", "score_text"]
