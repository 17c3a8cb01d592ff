"""A corpus in a vocabulary it was not built with: the one mapper from a corpus onto a fixed vocabulary.

Two callers need it: a checkpoint without a run, evaluated on a corpus the user names (``txl eval CKPT --dataset
NAME`` or ``--dataset text --test-file FILE``: the checkpoint's vocabulary), and a fine-tuned run
(``train.init_from``: the vocabulary of the checkpoint it starts from). Text is tokenized by the vocabulary's own
rules (:func:`encode_in_vocab`); a named corpus' ids are mapped symbol by symbol (:func:`remap_ids`). Symbols the
vocabulary does not know become ``<unk>`` and are counted in one warning line (:func:`warn_unknown`); a vocabulary
without ``<unk>`` makes the first of them an error that names it.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import List, Optional, Tuple, Union

import numpy as np

from .._io import normalize_newlines, split_lines
from ..errors import DataError
from ..text.vocab import ByteVocab, Vocab

log = logging.getLogger(__name__)

#: How the messages name the vocabulary a corpus is mapped onto.
CHECKPOINT_VOCAB = "the checkpoint's vocabulary"
INIT_FROM_VOCAB = "the vocabulary of the --init-from checkpoint"

Encoded = Tuple[np.ndarray, int, Counter]  # ids [N], tokens that became <unk>, the unknown symbols and their counts


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


def _unk_id(vocab, unknown: Counter, origin: str, whose: str) -> int:
    """``vocab``'s ``<unk>``; DataError naming the first unknown symbol when it has none."""
    unk = vocab.unk_idx if isinstance(vocab, Vocab) else None
    if unk is None:
        first = unknown.most_common(1)[0][0]
        raise DataError(f"{origin}: symbol {first!r} is not in {whose}, which has no <unk> to map it to "
                        f"({len(unknown)} unknown symbol(s) in all)")
    return unk


def _check_mappable(source, target, origin: str, whose: str) -> None:
    src_level, tgt_level = getattr(source, "level", "bpe"), getattr(target, "level", "bpe")
    if vocab_symbols(source) is None or vocab_symbols(target) is None or src_level != tgt_level:
        raise DataError(f"{origin}: the corpus' {src_level}-level vocabulary cannot be mapped symbol by symbol onto "
                        f"{whose} ({tgt_level} level)")


def remap_ids(ids, source, target, origin: str, whose: str = CHECKPOINT_VOCAB) -> Encoded:
    """``ids`` in vocabulary ``source`` as ids of ``target``, matched by symbol (lower-cased first when only
    ``target`` lower-cases); unknown symbols become ``<unk>``."""
    ids = np.asarray(ids, dtype=np.int64)
    if source.to_dict() == target.to_dict():
        return ids, 0, Counter()
    _check_mappable(source, target, origin, whose)
    lower = getattr(target, "lower_case", False) and not getattr(source, "lower_case", False)
    src = vocab_symbols(source)
    lut = np.array([_lookup(target, s.lower() if lower else s) for s in src], dtype=np.int64)  # [V_source]
    counts = np.bincount(ids, minlength=len(src))
    unknown = Counter({src[i]: int(counts[i]) for i in np.flatnonzero((lut < 0) & (counts > 0))})
    if unknown:
        lut[lut < 0] = _unk_id(target, unknown, origin, whose)
    return lut[ids], sum(unknown.values()), unknown


def _encode_words(vocab: Vocab, text: str, origin: str, whose: str) -> Encoded:
    table, unk, ids, unknown = vocab.sym2idx, vocab.unk_idx, [], Counter()
    for line in split_lines(normalize_newlines(text)):
        for sym in vocab.tokenize(line):
            idx = table.get(sym)
            if idx is None:
                unknown[sym] += 1
                idx = unk
            ids.append(idx)
    if unknown:
        _unk_id(vocab, unknown, origin, whose)
    return np.asarray(ids, dtype=np.int64), sum(unknown.values()), unknown


def _unknown_units(vocab: Vocab, text: Union[str, bytes]) -> Counter:
    """The characters (or bytes) of ``text`` that ``vocab`` lacks, with their counts."""
    if isinstance(text, bytes):
        counts = np.bincount(np.frombuffer(text, dtype=np.uint8), minlength=256)
        return Counter({str(b): int(counts[b]) for b in np.flatnonzero(counts) if str(b) not in vocab})
    chars = Counter(text.lower() if vocab.lower_case else text)
    return Counter({c: k for c, k in chars.items() if c not in vocab and c not in "\r\n"})


def encode_in_vocab(vocab, text: Union[str, bytes], origin: str, whose: str = CHECKPOINT_VOCAB) -> Encoded:
    """Ids ``[N]`` of ``text`` (bytes for a byte-level vocabulary) tokenized by ``vocab``'s rules, the number of
    tokens that became ``<unk>`` and the unknown symbols (exact at word level; at character and byte level the
    count is exact and the symbols are those of the raw text)."""
    if not isinstance(vocab, Vocab):  # bytes and byte-level BPE: nothing is ever unknown
        return np.asarray(vocab.encode(text), dtype=np.int64), 0, Counter()
    if vocab.level == "word":
        return _encode_words(vocab, text, origin, whose)
    try:
        ids = np.asarray(vocab.encode(text), dtype=np.int64)
    except DataError as exc:
        raise DataError(f"{origin}: {exc} ({whose})") from None
    n = int((ids == vocab.unk_idx).sum()) if vocab.unk_idx is not None else 0  # never the literal "<unk>"
    return ids, n, _unknown_units(vocab, text) if n else Counter()


def warn_unknown(origin: str, n_unknown: int, symbols: Counter, total: int, whose: str = CHECKPOINT_VOCAB) -> None:
    """One warning line: how many tokens became ``<unk>``, and the most frequent unknown symbols."""
    if not n_unknown:
        return
    shown = ", ".join(repr(s) for s, _ in symbols.most_common(5)) + (", ..." if len(symbols) > 5 else "")
    log.warning("warning: %s: %s of %s tokens (%.2f%%, %d distinct symbols) are not in %s and became <unk>: %s",
                origin, f"{n_unknown:,}", f"{total:,}", 100.0 * n_unknown / max(total, 1), len(symbols), whose, shown)


__all__ = ["CHECKPOINT_VOCAB", "INIT_FROM_VOCAB", "encode_in_vocab", "remap_ids", "vocab_symbols", "warn_unknown"]
