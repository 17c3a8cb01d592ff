"""Byte-level BPE tokenizer trained with HuggingFace ``tokenizers``, behind the data layer's small interface.

Text is cut into lines (each keeping its ``\\n``) before encoding, the same way for training, corpus encoding
and :meth:`BPETokenizer.encode`, so the ids of a text never depend on who encoded it. Byte-level BPE is
lossless: ``decode(encode(text)) == text``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Iterable, Iterator, List, Sequence

import numpy as np

from .._io import PathLike, TextInput, as_text, ids_list, resolve_save_path
from ..errors import DataError, one_line
from ..files import atomic_write_bytes

log = logging.getLogger(__name__)

TOKENIZER_FILENAME = "tokenizer.json"
_BATCH_LINES = 4096


def _lines_keepends(text: str) -> List[str]:
    """``text`` cut after every ``\\n`` (the pieces concatenate back to ``text``)."""
    parts = text.split("\n")
    pieces = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        pieces.append(parts[-1])
    return pieces


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class BPETokenizer:
    """A ``tokenizers.Tokenizer`` with a ByteLevel BPE model (``level == 'bpe'``)."""

    kind = "bpe"
    level = "bpe"

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8192, min_frequency: int = 2,
              special_tokens: Sequence[str] = ()) -> "BPETokenizer":
        """Train on ``texts`` (each a str; lines are cut as for encoding). ``vocab_size`` includes the 256 bytes."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

        if vocab_size < 256 + len(special_tokens):
            raise DataError(f"bpe_vocab_size must be at least {256 + len(special_tokens)} (the 256 bytes), "
                            f"got {vocab_size}")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      special_tokens=list(special_tokens),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())

        def lines() -> Iterator[str]:
            for text in texts:
                yield from _lines_keepends(text)

        tok.train_from_iterator(lines(), trainer=trainer)
        log.debug("trained byte-level BPE with %d tokens", tok.get_vocab_size())
        return cls(tok)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text_or_lines: TextInput, dtype=np.int64) -> np.ndarray:
        """Ids ``[N]`` of a text (or of lines, joined with ``\\n``)."""
        text = as_text(text_or_lines)
        if isinstance(text, bytes):
            raise DataError("a BPE tokenizer encodes str, not bytes")
        pieces = _lines_keepends(text)
        chunks = [np.zeros(0, dtype=dtype)]
        for batch in _batches(pieces, _BATCH_LINES):
            encs = self.tokenizer.encode_batch(list(batch), add_special_tokens=False)
            chunks.extend(np.asarray(e.ids, dtype=dtype) for e in encs)
        return np.concatenate(chunks)

    def decode(self, ids) -> str:
        """Text of ``ids`` (partial UTF-8 sequences become U+FFFD)."""
        values = ids_list(ids)
        bad = [i for i in values if not 0 <= i < len(self)]
        if bad:
            raise DataError(f"token id {bad[0]} is out of range for a BPE vocabulary of {len(self)} tokens")
        return self.tokenizer.decode(values, skip_special_tokens=False)

    def to_dict(self) -> dict:
        """The tokenizer's full JSON description (the content of ``tokenizer.json``)."""
        return json.loads(self.tokenizer.to_str(pretty=False))

    def save(self, path: PathLike) -> Path:
        """Write ``tokenizer.json`` (``path``: a ``.json`` file, or a directory)."""
        target = resolve_save_path(path, TOKENIZER_FILENAME)
        return atomic_write_bytes(target, self.tokenizer.to_str(pretty=False).encode("utf-8"))

    @classmethod
    def load(cls, path: PathLike) -> "BPETokenizer":
        """Read a ``tokenizer.json`` (a file, or a directory holding one)."""
        from tokenizers import Tokenizer

        p = Path(path)
        if p.is_dir():
            p = p / TOKENIZER_FILENAME
        try:
            return cls(Tokenizer.from_file(str(p)))
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise DataError(f"cannot read tokenizer {p}: {one_line(exc, first=True)}") from None

    def __repr__(self) -> str:
        return f"BPETokenizer(size={len(self)})"
