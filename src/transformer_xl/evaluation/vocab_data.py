"""Evaluation data in a checkpoint's own vocabulary, for checkpoints without a run (converted ones).

``txl eval CKPT --dataset NAME --data-dir DIR`` reads a named corpus and maps its symbols onto the
checkpoint's vocabulary; ``--dataset text --test-file FILE`` encodes the user's file with it. Symbols
the checkpoint does not know become ``<unk>`` and are counted in one warning line; a vocabulary without
``<unk>`` makes them an error naming the first one.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..data import ByteVocab, Vocab, load_corpus, load_vocab
from ..errors import CheckpointError, ConfigError, DataError

log = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")


@dataclass
class EvalData:
    """One split's token ids ``[N]`` and what the report needs about them."""

    ids: np.ndarray
    level: str  # decides ppl or bpc
    dataset: str
    n_token: int  # size of the vocabulary the ids are in
    keep_cpu_memory: bool = True


# ---------------------------------------------------------------------------------------------- symbols
def vocab_symbols(vocab) -> Optional[List[str]]:
    """The symbol of every id, or None for a tokenizer whose ids are not symbols (BPE)."""
    if isinstance(vocab, Vocab):
        return list(vocab.idx2sym)
    if isinstance(vocab, ByteVocab):
        return [str(i) for i in range(256)]
    return None


def _lookup(vocab, sym: str) -> int:
    """Id of ``sym`` in ``vocab``, -1 when absent."""
    if isinstance(vocab, Vocab):
        return vocab.sym2idx.get(sym, -1)
    return int(sym) if sym.isdigit() and int(sym) < 256 else -1


def _unk_id(vocab, unknown: Counter, origin: str) -> int:
    unk = vocab.unk_idx if isinstance(vocab, Vocab) else None
    if unk is None:
        first = unknown.most_common(1)[0][0]
        raise DataError(f"{origin}: symbol {first!r} is not in the checkpoint's vocabulary, which has no <unk> "
                        f"({len(unknown)} unknown symbol(s) in all)")
    return unk


def warn_unknown(origin: str, n_unknown: int, symbols: Counter, total: int) -> None:
    """One warning line: how many tokens became ``<unk>``, and the most frequent unknown symbols."""
    if not n_unknown:
        return
    shown = ", ".join(repr(s) for s, _ in symbols.most_common(5)) + (", ..." if len(symbols) > 5 else "")
    log.warning("warning: %s: %s of %s tokens (%d distinct symbols) are not in the checkpoint's vocabulary and "
                "count as <unk>: %s", origin, f"{n_unknown:,}", f"{total:,}", len(symbols), shown)


def remap_ids(ids: np.ndarray, source, target, origin: str) -> Tuple[np.ndarray, int, Counter]:
    """``ids`` in vocabulary ``source`` as ids of ``target`` (matched by symbol); unknown symbols -> <unk>."""
    if source.to_dict() == target.to_dict():
        return np.asarray(ids), 0, Counter()
    src = vocab_symbols(source)
    if src is None or vocab_symbols(target) is None:
        raise DataError(f"{origin}: the corpus' {source.kind} tokenizer and the checkpoint's {target.kind} "
                        f"tokenizer differ, and their ids cannot be matched by symbol")
    lut = np.array([_lookup(target, sym) for sym in src], dtype=np.int64)  # [V_source]
    counts = np.bincount(np.asarray(ids, dtype=np.int64), minlength=len(src))
    unknown = Counter({src[i]: int(counts[i]) for i in np.flatnonzero((lut < 0) & (counts > 0))})
    if unknown:
        lut[lut < 0] = _unk_id(target, unknown, origin)
    return lut[np.asarray(ids, dtype=np.int64)], sum(unknown.values()), unknown


def encode_file(vocab, path: Path) -> Tuple[np.ndarray, int, Counter]:
    """Ids ``[N]`` of a text file in ``vocab``, the number of tokens that became ``<unk>``, and the unknown
    symbols with their counts (exact at word level; at char/byte level the count is exact and the symbols
    are those of the raw text)."""
    if hasattr(vocab, "encode_file"):
        ids = vocab.encode_file(path)  # DataError for a missing, empty or undecodable file
    else:  # BPE: byte-level, nothing is unknown
        ids = vocab.encode(Path(path).read_text(encoding="utf-8"))
    if not isinstance(vocab, Vocab) or vocab.unk_idx is None:
        return ids, 0, Counter()  # without <unk>, encoding already refused an unknown symbol
    if vocab.level == "word":
        text = Path(path).read_text(encoding="utf-8")
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # universal newlines, as the vocab
        unknown = Counter(s for line in lines for s in vocab.tokenize(line) if s not in vocab)
        return ids, sum(unknown.values()), unknown
    n = int((ids == vocab.unk_idx).sum())  # a character or byte is never the literal "<unk>"
    if vocab.level == "byte":
        counts = np.bincount(np.frombuffer(Path(path).read_bytes(), dtype=np.uint8), minlength=256)
        symbols = Counter({str(b): int(counts[b]) for b in np.flatnonzero(counts) if str(b) not in vocab})
    else:
        text = Path(path).read_text(encoding="utf-8")
        chars = Counter(text.lower() if vocab.lower_case else text)
        symbols = Counter({c: k for c, k in chars.items() if c not in vocab and c not in "\r\n"})
    return ids, n, symbols


# ---------------------------------------------------------------------------------------------- the split
def checkpoint_vocab(model_dir: Path):
    try:
        return load_vocab(model_dir)
    except DataError as exc:
        raise CheckpointError(f"{model_dir}: the checkpoint has no usable vocabulary to encode the corpus with "
                              f"({exc})") from None


@dataclass
class EvalSource:
    """Where ``txl eval`` reads a split from for a checkpoint without a run: a named corpus (``dataset``, with
    ``data_dir``/``cache_dir``), or ``dataset="text"`` with one file per split (``files``: split -> path)."""

    dataset: Optional[str] = None
    data_dir: Optional[str] = None
    cache_dir: Optional[str] = None
    files: Dict[str, str] = field(default_factory=dict)

    @property
    def given(self) -> bool:
        return bool(self.dataset or self.files)


def _text_file(source: EvalSource, split: str) -> Path:
    path = source.files.get(split)
    if not path:
        given = [f"--{s}-file" for s in SPLITS if s in source.files]
        raise ConfigError(f"--split {split}: --dataset text needs --{split}-file FILE"
                          + (f" (got {', '.join(given)})" if given else ""))
    return Path(path)


def split_for_checkpoint(model_dir: Path, split: str, source: EvalSource) -> EvalData:
    """The split ``split`` of ``source`` in the checkpoint's vocabulary (see the module docstring)."""
    files = [f"--{s}-file" for s in SPLITS if s in source.files]
    if not source.dataset:
        raise ConfigError(f"{files[0]}: needs --dataset text")
    if source.dataset != "text" and files:
        raise ConfigError(f"{files[0]}: only with --dataset text (--dataset {source.dataset} reads its own files)")
    vocab = checkpoint_vocab(model_dir)
    if source.dataset == "text":
        path = _text_file(source, split)
        ids, n_unknown, unknown = encode_file(vocab, path)
        origin = str(path)
    else:
        corpus = load_corpus(source.dataset, data_dir=source.data_dir, cache_dir=source.cache_dir)
        origin = f"{corpus.name} {split}"
        ids, n_unknown, unknown = remap_ids(corpus.split(split), corpus.vocab, vocab, origin)
    warn_unknown(origin, n_unknown, unknown, int(np.asarray(ids).size))
    return EvalData(np.asarray(ids, dtype=np.int64), vocab.level, source.dataset, len(vocab))


__all__ = ["EvalData", "EvalSource", "encode_file", "remap_ids", "split_for_checkpoint", "vocab_symbols"]
