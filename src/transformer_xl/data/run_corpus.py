"""The corpus a run reads: what its ``data:`` section names, in a fixed vocabulary when the run keeps one.

:func:`load_run_corpus` is the one way training, ``txl eval RUN`` and ``txl context RUN`` get a run's corpus:
a named corpus, or the user's text files (``dataset: text``). A fine-tuned run (``train.init_from``) keeps the
vocabulary of the checkpoint it started from, so its corpus is encoded with that vocabulary: the user's text
files are tokenized by its rules, a named corpus is mapped symbol by symbol onto it. Symbols it does not know
become ``<unk>`` (counted in one warning line); when it has no ``<unk>``, the first unknown symbol is an error.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

from ..errors import DataError
from ._io import check_file, normalize_newlines, smallest_dtype, split_lines
from .corpus import Corpus, _user_parts, load_corpus, load_text_corpus
from .vocab import ByteVocab, Tokenizer, Vocab

log = logging.getLogger(__name__)


def load_run_corpus(data, vocab: Optional[Tokenizer] = None, vocab_origin=None) -> Corpus:
    """The corpus of a run's data section ``data`` (the fields of ``training.DataConfig``: ``dataset``,
    ``data_dir``, ``cache_dir``, ``train_file``, ``valid_file``, ``test_file``, ``level``, ``bpe_vocab_size``).

    With ``vocab`` (a fine-tuned run's: its ``--init-from`` checkpoint's, saved at ``vocab_origin``) the corpus
    is encoded with that vocabulary (module docstring); without, a named corpus comes with its own and the user's
    files get one fitted on their train file.
    """
    if vocab is not None:
        return _in_vocab(data, vocab, vocab_origin)
    if data.dataset == "text":
        _need_train_file(data)
        return load_text_corpus(data.train_file, data.valid_file, data.test_file, level=data.level,
                                bpe_vocab_size=data.bpe_vocab_size, cache_dir=data.cache_dir)
    return load_corpus(data.dataset, data_dir=data.data_dir, cache_dir=data.cache_dir)


def _need_train_file(data) -> None:
    if not data.train_file:
        raise DataError("dataset 'text' needs --train-file PATH (and optionally --valid-file, --test-file)")


# ---------------------------------------------------------------------------- in a fixed vocabulary
def encode_counting(vocab, text, what: str) -> Tuple[np.ndarray, int]:
    """Ids ``[N]`` of ``text`` under a fixed vocabulary and how many symbols became ``<unk>``."""

    if not isinstance(vocab, Vocab):  # bytes and byte-level BPE: nothing is ever unknown
        return np.asarray(vocab.encode(text), dtype=np.int64), 0
    unk = vocab.unk_idx
    if vocab.level != "word":
        try:
            ids = vocab.encode(text)
        except DataError as exc:
            raise DataError(f"{what}: {exc} (the vocabulary of the --init-from checkpoint)") from None
        return ids, int((ids == unk).sum()) if unk is not None else 0

    table, ids, unknown = vocab.sym2idx, [], 0
    for line in split_lines(normalize_newlines(text)):
        for sym in vocab.tokenize(line):
            idx = table.get(sym)
            if idx is None:
                if unk is None:
                    raise DataError(f"{what}: symbol {sym!r} is not in the vocabulary of the --init-from "
                                    f"checkpoint, which has no <unk> to map it to")
                idx, unknown = unk, unknown + 1
            ids.append(idx)
    return np.asarray(ids, dtype=np.int64), unknown


def _text_splits(data_cfg, vocab) -> Tuple[Dict[str, np.ndarray], int, int]:
    _need_train_file(data_cfg)
    paths = {"train": check_file(data_cfg.train_file, "train file"),
             "valid": None if data_cfg.valid_file is None else check_file(data_cfg.valid_file, "valid file"),
             "test": None if data_cfg.test_file is None else check_file(data_cfg.test_file, "test file")}
    level = "byte" if vocab.level == "byte" else ("char" if vocab.level == "char" else "word")
    if data_cfg.level != vocab.level:
        log.info("--init-from: the checkpoint's vocabulary is %s level: the text is read at that level", vocab.level)
    parts = _user_parts(paths, level)
    splits, unknown, total = {}, 0, 0
    for split, part in parts.items():
        what = f"the {split} split ({paths[split] or 'carved from ' + str(paths['train'])})"
        ids, n_unknown = encode_counting(vocab, part, what)
        if ids.size == 0:
            raise DataError(f"{what} has no tokens")
        splits[split], unknown, total = ids, unknown + n_unknown, total + ids.size
    return splits, unknown, total


def _mapped_splits(data_cfg, vocab) -> Tuple[Dict[str, np.ndarray], int, int, str]:
    """A named corpus, its ids mapped symbol by symbol onto ``vocab``."""

    corpus = load_corpus(data_cfg.dataset, data_dir=data_cfg.data_dir, cache_dir=data_cfg.cache_dir)
    source = corpus.vocab
    splits = {s: np.asarray(getattr(corpus, s), dtype=np.int64) for s in ("train", "valid", "test")}
    if isinstance(source, ByteVocab) and isinstance(vocab, ByteVocab):
        return splits, 0, 0, corpus.name
    if not (isinstance(source, Vocab) and isinstance(vocab, Vocab) and source.level == vocab.level):
        raise DataError(f"dataset {data_cfg.dataset}: its {source.level}-level vocabulary cannot be mapped onto the "
                        f"--init-from checkpoint's {vocab.level}-level one; fine-tune on the corpus' files with "
                        f"--dataset text --train-file ... instead")
    lower = vocab.lower_case and not source.lower_case
    lut = np.empty(len(source), dtype=np.int64)
    unknown_mask = np.zeros(len(source), dtype=bool)
    for i, sym in enumerate(source.idx2sym):
        idx = vocab.sym2idx.get(sym.lower() if lower else sym)
        if idx is None:
            if vocab.unk_idx is None:
                raise DataError(f"dataset {data_cfg.dataset}: symbol {sym!r} is not in the vocabulary of the "
                                f"--init-from checkpoint, which has no <unk> to map it to")
            idx, unknown_mask[i] = vocab.unk_idx, True
        lut[i] = idx
    unknown = sum(int(unknown_mask[ids].sum()) for ids in splits.values())
    total = sum(ids.size for ids in splits.values())
    return {s: lut[ids] for s, ids in splits.items()}, unknown, total, corpus.name


def _in_vocab(data_cfg, vocab, source) -> Corpus:
    """The run's corpus encoded with a fixed vocabulary (the ``--init-from`` checkpoint's, saved at ``source``)."""

    if data_cfg.dataset == "text":
        splits, unknown, total = _text_splits(data_cfg, vocab)
        name = Path(data_cfg.train_file).stem
    else:
        splits, unknown, total, name = _mapped_splits(data_cfg, vocab)
    if unknown:
        log.warning("--init-from: %s of %s tokens (%.2f%%) are not in the vocabulary of %s and became <unk>",
                    f"{unknown:,}", f"{total:,}", 100.0 * unknown / max(total, 1), source)
    dtype = smallest_dtype(len(vocab))
    arrays = {s: ids.astype(dtype) for s, ids in splits.items()}
    return Corpus(name, vocab.level, vocab, arrays["train"], arrays["valid"], arrays["test"],
                  meta={"init_from": str(source), "unknown_tokens": unknown})
