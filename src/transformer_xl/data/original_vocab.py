"""The vocabularies the authors' code builds at run time, for checkpoints of that code (which carry none).

``get_lm_corpus`` / ``Corpus`` of ``pytorch/data_utils.py`` and ``Vocab`` of ``pytorch/utils/vocabulary.py`` in
kimiyoung/transformer-xl build the symbol table from the corpus every time:

=========  ===========================================  ==========  =========================================
name       files counted (``count_file``, no ``<eos>``)  lower_case  table
=========  ===========================================  ==========  =========================================
``wt103``  train                                        no          ``['<eos>']`` + ``Counter.most_common()``
``wt2``    train, valid, test                           no          same
``ptb``    train, valid, test                           yes         same
``enwik8`` train, valid, test of prep_enwik8.py         (yes)       ``most_common()`` of the decimal byte symbols
``text8``  train, valid, test of prep_text8.py          (yes)       ``most_common()`` of the characters (``_``)
``lm1b``   none: ``1b_word_vocab.txt``, in file order   no          first field of each line, ``<UNK>`` unknown
=========  ===========================================  ==========  =========================================

Ties in ``most_common`` keep first-seen order, so ids depend on the order files are counted in.
:func:`original_vocab` rebuilds these tables exactly (same ids) as our :class:`~.vocab.Vocab`: word level with
``<eos>`` ending each line (wt103, wt2, ptb), ``<S>`` around each sentence (lm1b), byte level (enwik8) or
character level (text8, whose ``_`` symbol, the original's stand-in for a space, is a space here), so that the
converted checkpoint encodes and decodes text like our own corpora of the same name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .._io import PathLike
from ..errors import DataError
from ..text.vocab import EOS, Vocab
from .corpus import SPECS, _from_data_dir, count_parts, enwik8_parts, enwik8_vocab, text8_parts, text8_vocab
from .corpus_cache import SPLITS, cache_root

ORIGINAL_CORPORA = ("wt103", "wt2", "ptb", "enwik8", "text8", "lm1b")

#: name -> (files counted, lower_case) of the word-level corpora in ``get_lm_corpus``.
WORD_RULES: Dict[str, Tuple[Sequence[str], bool]] = {
    "wt103": (("train",), False), "wt2": (SPLITS, False), "ptb": (SPLITS, True)}
#: Where ``getdata.sh`` puts each corpus under ``data/`` (and the names our own layouts use).
_SUBDIRS = {"enwik8": ("enwik8",), "text8": ("text8",), "lm1b": ("one-billion-words", "lm1b")}
LM1B_VOCAB = "1b_word_vocab.txt"


def original_vocab(name: str, data_dir: PathLike, cache_dir: Optional[PathLike] = None) -> Vocab:
    """The vocabulary the original code builds for corpus ``name`` from the files in ``data_dir``.

    Args:
        name: one of :data:`ORIGINAL_CORPORA`.
        data_dir: the corpus directory, in the layout of the original ``getdata.sh`` (``train.txt`` ...; the
            ``prep_*.py`` outputs for enwik8/text8; ``1b_word_vocab.txt`` for lm1b) or any layout
            :func:`~.corpus.load_corpus` accepts (``wiki.train.tokens``, ``ptb.train.txt``, the raw ``enwik8``
            or ``text8`` file, the downloaded archive).
        cache_dir: where an archive is extracted if ``data_dir`` holds only that (default: the corpus cache).

    Raises DataError (one line) for an unknown name or missing files.
    """
    key = str(name).strip().lower()
    if key not in ORIGINAL_CORPORA:
        raise DataError(f"unknown corpus {name!r} for an original vocabulary; expected one of "
                        f"{', '.join(ORIGINAL_CORPORA)}")
    directory = Path(data_dir).expanduser()
    if not directory.is_dir():
        raise DataError(f"data directory not found: {directory}")
    if key in WORD_RULES:
        return _word_vocab(key, directory, cache_dir)
    if key == "lm1b":
        return _lm1b_vocab(directory)
    return _hutter_vocab(key, directory, cache_dir)


def _word_vocab(key: str, directory: Path, cache_dir: Optional[PathLike]) -> Vocab:
    """wt103 / wt2 / ptb: ``['<eos>']``, then the counted words; lines encode with ``<eos>`` at their end."""
    counted, lower_case = WORD_RULES[key]
    inputs = _from_data_dir(SPECS[key], directory, cache_root(cache_dir))
    vocab = Vocab(special=[EOS], lower_case=lower_case, add_eos=False)
    for split in counted:
        vocab.count_file(inputs[split])
    vocab.build_vocab()
    vocab.add_eos = True  # the original counts without <eos> but encodes with it
    return vocab


def _lm1b_vocab(directory: Path) -> Vocab:
    """lm1b: ``1b_word_vocab.txt`` in file order, ``<S>`` around each sentence."""
    for base in [directory] + [directory / d for d in _SUBDIRS["lm1b"]]:
        if (base / LM1B_VOCAB).is_file():
            return Vocab(add_double_eos=True, vocab_file=base / LM1B_VOCAB).build_vocab()
    raise DataError(f"lm1b: {LM1B_VOCAB} not found in {directory}")


def _prepped_files(key: str, directory: Path) -> Optional[List[Path]]:
    """``train.txt``, ``valid.txt``, ``test.txt`` written by the original prep script, if present."""
    for base in [directory] + [directory / d for d in _SUBDIRS[key]]:
        files = [base / f"{s}.txt" for s in SPLITS]
        if all(f.is_file() for f in files):
            return files
    return None


def _hutter_vocab(key: str, directory: Path, cache_dir: Optional[PathLike]) -> Vocab:
    """enwik8 / text8, from the prep script's outputs or from the raw file (split as the prep script does)."""
    prepped = _prepped_files(key, directory)
    if prepped is None:
        inputs = _from_data_dir(SPECS[key], directory, cache_root(cache_dir))
        if key == "enwik8":
            return count_parts(enwik8_parts(inputs), enwik8_vocab())
        return count_parts(text8_parts(inputs), text8_vocab())
    counter = Vocab(lower_case=True)  # the original Vocab's defaults: whitespace split, lower-cased
    for path in prepped:
        counter.count_file(path)
    symbols = [sym for sym, _ in counter.counter.most_common()]
    return _enwik8_from_symbols(symbols, prepped[0]) if key == "enwik8" else _text8_from_symbols(symbols, prepped[0])


def _enwik8_from_symbols(symbols: List[str], origin: Path) -> Vocab:
    bad = [s for s in symbols if not (s.isdigit() and int(s) < 256)]
    if bad:
        raise DataError(f"{origin} is not an output of prep_enwik8.py (symbol {bad[0]!r} is not a byte value)")
    vocab = enwik8_vocab()
    for sym in symbols:
        vocab.add_symbol(str(int(sym)))
    return vocab


def _text8_from_symbols(symbols: List[str], origin: Path) -> Vocab:
    bad = [s for s in symbols if len(s) != 1 or s == " "]
    if bad:
        raise DataError(f"{origin} is not an output of prep_text8.py (symbol {bad[0]!r} is not one character)")
    vocab = text8_vocab()
    for sym in symbols:
        vocab.add_symbol(" " if sym == "_" else sym)
    return vocab


__all__ = ["ORIGINAL_CORPORA", "WORD_RULES", "original_vocab"]
