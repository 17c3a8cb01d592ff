"""Fine-tuning: ``train.init_from`` (``txl train --init-from CKPT``) starts a run from a trained checkpoint.

The run keeps the checkpoint's model (its ``config.json``) and vocabulary, and starts a fresh optimiser and
learning-rate schedule at step 0. It may change what does not change the weights' shapes or meaning:
the lengths (``tgt_len``, ``mem_len``, ``ext_len``, ``clamp_len``, ``same_length``), ``dropout`` and
``dropatt``; any other model field that differs from the checkpoint's is refused, naming the field.

The corpus is encoded with the checkpoint's vocabulary: the user's text files (``--dataset text``) are
tokenized by its rules, a named corpus is mapped symbol by symbol onto it. Symbols it does not know become
``<unk>`` (counted in one warning line); when it has no ``<unk>``, the first unknown symbol is an error.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from ..data import ByteVocab, Corpus, Vocab, load_corpus, load_vocab
from ..data._io import check_file, normalize_newlines, smallest_dtype, split_lines
from ..data.corpus import _user_parts
from ..errors import CheckpointError, ConfigError, DataError
from ..hub import VOCAB_NAMES, Located, locate
from ..model.config import TransformerXLConfig
from ..model.io import model_config

log = logging.getLogger(__name__)

FINETUNE_FIELDS = ("tgt_len", "mem_len", "ext_len", "clamp_len", "same_length", "dropout", "dropatt")


@dataclass
class InitSource:
    """A checkpoint to start from: its files, model config and vocabulary."""

    located: Located
    config: TransformerXLConfig
    vocab: object

    @property
    def directory(self) -> Path:
        return self.located.directory


def resolve_init_dir(path) -> Path:
    """The model folder of ``--init-from``: a folder (ours or HuggingFace's), a run's ``best/`` or last checkpoint,
    or a hub id's snapshot."""
    return locate(path, label="--init-from: ").directory


def load_init_source(path) -> InitSource:
    """Config and vocabulary of an ``--init-from`` checkpoint (the weights are read later, into the model)."""
    located = locate(path, label="--init-from: ")
    try:
        config = model_config(located)
    except CheckpointError as exc:
        raise CheckpointError(f"--init-from: {exc}") from None
    if located.vocab_path is None:
        raise CheckpointError(f"--init-from: {located.directory} has no vocabulary ({', '.join(VOCAB_NAMES)}); "
                              f"fine-tuning keeps the checkpoint's vocabulary, so it needs one")
    try:
        vocab = load_vocab(located.directory, huggingface=located.format == "hf")
    except DataError as exc:
        raise CheckpointError(f"--init-from: {exc}") from None
    if len(vocab) != config.n_token:
        raise CheckpointError(f"--init-from: {located.directory}: the vocabulary has {len(vocab):,} symbols, the "
                              f"model {config.n_token:,} (n_token)")
    return InitSource(located, config, vocab)


# ---------------------------------------------------------------------------- the model
def finetune_model_fields(requested: dict, base: TransformerXLConfig, source: Path) -> dict:
    """The model section of a fine-tuning run: ``base``'s fields with the allowed changes of ``requested``.

    ``requested`` holds the fields the user set (config file, command line); a field outside
    :data:`FINETUNE_FIELDS` that differs from ``base`` is a ConfigError naming it.
    """
    values = base.to_dict()
    unknown = sorted(set(requested) - set(values))
    if unknown:
        raise ConfigError(f"unknown model field(s): {', '.join(unknown)}")
    wanted = TransformerXLConfig.from_dict({**values, **{k: v for k, v in requested.items() if k != "n_token"}})
    for f in dataclasses.fields(TransformerXLConfig):
        mine, theirs = getattr(wanted, f.name), getattr(base, f.name)
        if mine != theirs and f.name not in FINETUNE_FIELDS:
            raise ConfigError(f"{f.name}: the --init-from checkpoint {source} has {f.name}={theirs!r}, this run asks "
                              f"for {mine!r}; fine-tuning keeps the model (only {', '.join(FINETUNE_FIELDS)} may "
                              f"change)")
    out = wanted.to_dict()
    out.pop("n_token")
    return out


# ---------------------------------------------------------------------------- the data
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
    if not data_cfg.train_file:
        raise DataError("dataset 'text' needs --train-file PATH (and optionally --valid-file, --test-file)")
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


def load_finetune_corpus(data_cfg, vocab, source: Path):
    """The run's corpus encoded with a fixed vocabulary (the ``--init-from`` checkpoint's)."""

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
