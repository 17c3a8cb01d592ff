"""Corpora: named and user corpora (downloaded, encoded, cached) and ordered LM batches. The vocabularies they
are encoded with live in :mod:`transformer_xl.text`; the ones shown below are importable from here too.

Quick tour::

    from transformer_xl.data import load_corpus, load_text_corpus

    corpus = load_corpus("wt103")              # download, preprocess as the paper's code, cache
    corpus = load_corpus("ptb", data_dir="data/ptb")
    corpus = load_corpus("default")            # offline: the Python standard library's source, byte level
    corpus = load_corpus("stdlib")             # all of it (about 31 MB), tests included, whole files per split
    corpus = load_text_corpus("my.txt", level="bpe")
    corpus = load_run_corpus(run_config.data)  # what a run's data: section names (training.DataConfig)
    vocab = read_hf_vocab("transfo-xl-wt103/vocab.pkl")   # HuggingFace's pickle, read without running it
    vocab = original_vocab("wt103", "data/wikitext-103")  # the ids the authors' code gives its checkpoints

    it = corpus.get_iterator("train", batch_size=60, tgt_len=150, varlen=True, seed=1)
    for input_ids, labels, seq_len in it:      # [B, L] int64 tensors, rows continue across batches
        ...
    state = it.state_dict()                    # JSON-serialisable; load_state_dict() resumes exactly

Every user error (missing, empty or undecodable file, unknown corpus, failed download) is a one-line
:class:`transformer_xl.errors.DataError`.
"""

from ..text import BPETokenizer, ByteVocab, HFVocab, Tokenizer, Vocab, load_plain_pickle, load_vocab, read_hf_vocab
from .corpus import (
    KNOWN_CORPORA,
    LEVELS,
    Corpus,
    load_corpus,
    load_default_corpus,
    load_stdlib_corpus,
    load_text_corpus,
    metric_name,
    split_sizes,
)
from .corpus_cache import CACHE_ENV, cache_root
from .download import RemoteFile, download_file, verify_file
from .iterator import LMOrderedIterator, align_labels
from .original_vocab import ORIGINAL_CORPORA, original_vocab
from .run_corpus import load_run_corpus
from .stdlib import DEFAULT_CORPUS_BYTES

__all__ = [
    "BPETokenizer", "ByteVocab", "CACHE_ENV", "Corpus", "DEFAULT_CORPUS_BYTES", "HFVocab", "KNOWN_CORPORA", "LEVELS",
    "LMOrderedIterator", "ORIGINAL_CORPORA", "RemoteFile", "Tokenizer", "Vocab", "align_labels", "cache_root",
    "download_file", "load_corpus", "load_default_corpus", "load_plain_pickle", "load_run_corpus", "load_stdlib_corpus",
    "load_text_corpus", "load_vocab", "metric_name", "original_vocab", "read_hf_vocab", "split_sizes", "verify_file",
]
