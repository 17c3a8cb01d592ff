"""Restore a saved tokenizer of any kind: ``vocab.json`` (Vocab, HFVocab or ByteVocab) or ``tokenizer.json`` (BPE)."""

from __future__ import annotations

from pathlib import Path

from ..errors import DataError
from ._io import PathLike, read_json
from .bpe import BPETokenizer
from .hf_vocab import HFVocab
from .safe_pickle import looks_like_pickle
from .vocab import VOCAB_FILENAME, VOCAB_FORMAT, VOCAB_VERSION, ByteVocab, Tokenizer, Vocab


def _pickle_hint(path: Path) -> DataError:
    return DataError(f"{path} is a pickle (HuggingFace's vocabulary format), which is never loaded directly; "
                     f"convert it with `txl convert --from hf --vocab {path}` (or transformer_xl.data.read_hf_vocab)")


def _load_json_tokenizer(path: Path) -> Tokenizer:
    if looks_like_pickle(path):
        raise _pickle_hint(path)
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


def load_vocab(dir_or_file: PathLike) -> Tokenizer:
    """Restore a saved tokenizer: ``vocab.json`` (Vocab, HFVocab or ByteVocab) or ``tokenizer.json`` (BPE).

    A directory is searched for ``vocab.json`` then ``tokenizer.json``. A pickle (HuggingFace's ``vocab.pkl``)
    is refused with a line saying how to convert it.
    """
    p = Path(dir_or_file).expanduser()
    if p.is_dir():
        for name in (VOCAB_FILENAME, "tokenizer.json"):
            if (p / name).is_file():
                return _load_json_tokenizer(p / name)
        for name in ("vocab.pkl", "vocab.bin"):
            if (p / name).is_file() and looks_like_pickle(p / name):
                raise _pickle_hint(p / name)
        raise DataError(f"no vocab.json or tokenizer.json in {p}")
    if not p.is_file():
        raise DataError(f"vocabulary not found: {p}")
    return _load_json_tokenizer(p)
