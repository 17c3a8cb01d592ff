"""Tokenizers and vocabularies: text in, ids out, and back.

::

    from transformer_xl.text import TransformerXLTokenizer, load_vocab

    tokenizer = TransformerXLTokenizer.from_pretrained("transfo-xl/transfo-xl-wt103")   # a hub id, folder or run
    vocab = load_vocab("runs/wt2/best")        # any vocabulary file a checkpoint carries (vocab_files.py)

:mod:`.vocab` (``Vocab``: word, character and byte symbol tables, the original code's rules; ``ByteVocab``),
:mod:`.bpe` (``BPETokenizer``), :mod:`.hf_vocab` (HuggingFace's ``TransfoXLTokenizer`` vocabulary with its Moses
rules), :mod:`.vocab_files` (every accepted vocabulary file), :mod:`.safe_pickle` (pickles read without running
them) and :mod:`.tokenizer` (``TransformerXLTokenizer``: a checkpoint's vocabulary for text as users write it).
"""

from .bpe import BPETokenizer
from .hf_vocab import HFVocab, read_hf_vocab
from .safe_pickle import load_plain_pickle
from .tokenizer import StreamDecoder, TransformerXLTokenizer
from .vocab import ByteVocab, Tokenizer, Vocab
from .vocab_files import load_vocab, read_vocab_file

__all__ = ["BPETokenizer", "ByteVocab", "HFVocab", "StreamDecoder", "Tokenizer", "TransformerXLTokenizer", "Vocab",
           "load_plain_pickle", "load_vocab", "read_hf_vocab", "read_vocab_file"]
