"""Restore a saved tokenizer of any kind that checkpoints carry.

Accepted files (:data:`transformer_xl.checkpoints.hub.VOCAB_NAMES`, looked for in this order in a folder):

* ``vocab.json``: ours (``Vocab``, ``HFVocab`` or ``ByteVocab``);
* ``tokenizer.json``: a HuggingFace ``tokenizers`` BPE tokenizer (ours at BPE level);
* ``vocab.pkl`` / ``vocab.bin``: HuggingFace ``TransfoXLTokenizer``'s pickle, read by :mod:`.safe_pickle`
  without executing anything (a payload is refused in one line);
* ``vocab.txt`` or any plain text file: one symbol per line (the first field of each line), as the original
  code's ``vocab_file`` (lm1b) and HuggingFace's ``vocab_file`` are written; the table must hold ``<unk>`` or
  ``<UNK>``. Its tokenization is HuggingFace's (Moses) when it comes with a HuggingFace model, else the original
  code's (whitespace; lm1b's ``<S>`` markers when the table has them).

:func:`read_hf_word_list` reads a word list as transformers 4.35's ``TransfoXLTokenizer(vocab_file=...)`` (or
``pretrained_vocab_file=``) does, with that tokenizer's settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List

from .._io import PathLike, check_file, iter_lines, read_json
from ..errors import DataError
from .bpe import BPETokenizer
from .hf_vocab import HFVocab, read_hf_vocab
from .safe_pickle import looks_like_pickle
from .vocab import DOUBLE_EOS, EOS, UNK_SYMBOLS, VOCAB_FORMAT, VOCAB_VERSION, ByteVocab, Tokenizer, Vocab

VOCAB_FILES = ("vocab.json", "tokenizer.json", "vocab.pkl", "vocab.bin", "vocab.txt")
ACCEPTED = ("vocab.json (transformer-xl), tokenizer.json (tokenizers BPE), vocab.pkl/vocab.bin (HuggingFace "
            "TransfoXLTokenizer) or a text file of one symbol per line")


def _load_json_tokenizer(path: Path) -> Tokenizer:
    obj = read_json(path, "vocabulary file")
    if isinstance(obj, dict) and obj.get("format") == VOCAB_FORMAT:
        if obj.get("version", 0) > VOCAB_VERSION:
            raise DataError(f"{path} was written by a newer transformer-xl (vocab format {obj['version']})")
        if obj.get("kind") == ByteVocab.kind:
            return ByteVocab()
        if obj.get("kind") == Vocab.kind:
            return Vocab.from_dict(obj)
        if obj.get("kind") == "hf":
            return HFVocab.from_dict(obj)
        raise DataError(f"{path}: unknown vocabulary kind {obj.get('kind')!r}")
    if isinstance(obj, dict) and "model" in obj:
        return BPETokenizer.load(path)
    raise DataError(f"{path} is neither a transformer-xl vocabulary nor a tokenizers tokenizer.json")


def read_symbols(path: PathLike) -> List[str]:
    """The first field of each line of a plain vocabulary file, in order (a blank line is a DataError)."""
    path = check_file(path, "vocabulary file")
    symbols = []
    for lineno, line in enumerate(iter_lines(path), 1):
        fields = line.split()
        if not fields:
            raise DataError(f"vocabulary file {path}: line {lineno} is blank (expected one symbol per line)")
        symbols.append(fields[0])
    if not any(s in symbols for s in UNK_SYMBOLS):
        raise DataError(f"vocabulary file {path} has no <unk> or <UNK> symbol")
    return symbols


def read_hf_word_list(path: PathLike, **settings) -> HFVocab:
    """A word list read as transformers 4.35's ``TransfoXLTokenizer`` reads its ``vocab_file`` (``_build_from_file``):
    the first field of each line, a repeated symbol keeping its first id, ``<UNK>`` (else ``<unk>``) the unknown
    symbol; a pickle (``vocab.pkl``/``vocab.bin``, its ``pretrained_vocab_file``, read without unpickling) gives its
    symbols and unknown symbol. Either is tokenized with HuggingFace's rules and ``settings`` (the keywords of
    :class:`HFVocab`: ``lower_case``, ``delimiter``, ``never_split``, ``split_at``, ``language``, ``special``),
    the pickle's own settings left aside as 4.35's constructor leaves them."""
    p = check_file(path, "vocabulary file")
    if looks_like_pickle(p):
        pickled = read_hf_vocab(p)
        symbols, unk = list(pickled.idx2sym), pickled.unk
    else:
        symbols = list(dict.fromkeys(read_symbols(p)))
        unk = next(s for s in ("<UNK>", "<unk>") if s in symbols)  # 4.35 looks for <UNK> first
    return HFVocab(symbols, unk=unk, add_eos=EOS in symbols, **settings)


def read_symbol_file(path: PathLike, huggingface: bool = False) -> Vocab:
    """A plain vocabulary file: the first field of each line, in order (see the module docstring)."""
    if huggingface:
        return read_hf_word_list(path)
    path = check_file(path, "vocabulary file")
    symbols = read_symbols(path)
    double = DOUBLE_EOS in symbols
    vocab = Vocab(vocab_file=path, add_double_eos=double, add_eos=EOS in symbols and not double)
    return vocab.build_vocab()


def is_saved_json(path: PathLike) -> bool:
    """Whether a vocabulary file is JSON (``vocab.json``, ``tokenizer.json``) rather than a pickle or a word list
    (a word list whose first symbol is ``{`` or ``[`` included: it is JSON only if it parses as JSON)."""
    p = Path(path)
    if looks_like_pickle(p):
        return False
    if p.suffix == ".json":
        return True
    with open(p, "rb") as f:
        if f.read(64).lstrip()[:1] not in (b"{", b"["):
            return False
    try:
        json.loads(p.read_bytes())
    except ValueError:
        return False
    return True


def read_vocab_file(path: PathLike, huggingface: bool = False) -> Tokenizer:
    """One tokenizer file of any accepted kind (module docstring); ``huggingface``: a plain symbol file is
    tokenized as HuggingFace's TransfoXLTokenizer does."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataError(f"vocabulary not found: {p}" + (" (a folder: give the file)" if p.is_dir() else ""))
    if looks_like_pickle(p):
        return read_hf_vocab(p)
    if is_saved_json(p):
        return _load_json_tokenizer(p)
    try:
        return read_symbol_file(p, huggingface)
    except DataError as exc:
        raise DataError(f"{exc}; accepted vocabularies: {ACCEPTED}") from None


def load_vocab(dir_or_file: PathLike, huggingface: bool = False) -> Tokenizer:
    """Restore a saved tokenizer: a file (:func:`read_vocab_file`), or a folder searched for
    :data:`VOCAB_FILES` in order."""
    p = Path(dir_or_file).expanduser()
    if p.is_dir():
        for name in VOCAB_FILES:
            if (p / name).is_file():
                return read_vocab_file(p / name, huggingface)
        raise DataError(f"no vocabulary in {p} (looked for {', '.join(VOCAB_FILES)})")
    return read_vocab_file(p, huggingface)
