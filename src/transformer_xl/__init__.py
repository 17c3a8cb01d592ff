"""transformer-xl: Transformer-XL language models (Dai et al., 2019).

``from transformer_xl import TransformerXL, TransformerXLTokenizer, generate_text`` is all a former HuggingFace
user needs::

    model = TransformerXL.from_pretrained("transfo-xl/transfo-xl-wt103")       # a hub id, a folder or a run
    tokenizer = TransformerXLTokenizer.from_pretrained("transfo-xl/transfo-xl-wt103")
    print(generate_text(model, tokenizer, "The castle was built in", max_new_tokens=40))

``open_checkpoint`` opens both at once (and knows the run); ``generate`` works on token ids. Sub-packages hold the
rest: ``data`` (corpora, vocabularies), ``training``, ``evaluation``, ``generation`` and ``convert``.
"""

__version__ = "0.1.0"

from .model import TransformerXL, TransformerXLConfig  # noqa: E402  (model.io reads __version__)
from .data.tokenizer import TransformerXLTokenizer  # noqa: E402
from .generation import generate  # noqa: E402
from .generation.text import generate_text  # noqa: E402
from .evaluation.score import score_text  # noqa: E402
from .pretrained import Checkpoint, open_checkpoint, push_to_hub  # noqa: E402

__all__ = ["Checkpoint", "TransformerXL", "TransformerXLConfig", "TransformerXLTokenizer", "__version__", "generate",
           "generate_text", "open_checkpoint", "push_to_hub", "score_text"]
