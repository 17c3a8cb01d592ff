"""What ``txl convert`` does: an original, HuggingFace or TensorFlow checkpoint written as a transformer-xl
checkpoint folder (``config.json``, ``model.safetensors`` and the vocabulary as ``vocab.json``).

::

    from transformer_xl.jobs import ConvertSettings, convert_to_folder

    done = convert_to_folder("model.ckpt-0", "out", ConvertSettings(source="tf", config="wt103_large"))
    done = convert_to_folder("transfo-xl/transfo-xl-wt103", "wt103", ConvertSettings(source="hf"))

A HuggingFace folder or hub id needs no conversion to be used (every command opens it directly); converting one
without ``config`` opens it as every command does and writes our files once, with its vocabulary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..checkpoints.hub import VOCAB_NAMES
from ..convert import convert_checkpoint, convert_tf_checkpoint
from ..convert.original import check_out_dir
from ..data import original_vocab
from ..errors import ConfigError, DataError
from ..model import TransformerXL
from ..pretrained import open_checkpoint
from ..text.vocab_files import read_vocab_file

log = logging.getLogger(__name__)


@dataclass
class ConvertSettings:
    """Who wrote the checkpoint (``original``, ``hf``, ``tf``), its constructor arguments or run flags
    (``config``: a JSON file, or a built-in config name for ``tf``; None for a whole HuggingFace folder or hub id,
    with ``revision``), and the vocabulary to write: a file (``vocab``), the authors' vocabulary of a corpus
    rebuilt from ``data_dir`` (``vocab_from_corpus``), or for ``hf`` the file beside the weights."""

    source: str = "original"
    config: Optional[str] = None
    revision: Optional[str] = None
    vocab: Optional[str] = None
    vocab_from_corpus: Optional[str] = None
    data_dir: Optional[str] = None


@dataclass
class Converted:
    """The converted model and the vocabulary written beside it (None when there was none)."""

    model: TransformerXL
    vocab: object


def convert_to_folder(source, out_dir, settings: ConvertSettings) -> Converted:
    """Convert the checkpoint ``source`` (a state dict file, a TensorFlow prefix, or a HuggingFace folder or hub
    id) into the folder ``out_dir``."""
    s = settings
    if s.revision and (s.source != "hf" or s.config):
        raise ConfigError("--revision: only for --from hf with a hub id (and no --config)")
    if s.config is None and s.source != "hf":
        raise ConfigError(f"--config: required with --from {s.source} (the constructor arguments or run flags)")
    if s.config is None:
        return _convert_hf_folder(source, out_dir, s)
    vocab = _vocabulary(source, s)
    if s.source == "tf":
        model = convert_tf_checkpoint(source, s.config, out_dir, vocab=vocab)
    else:
        model = convert_checkpoint(source, s.config, out_dir, source=s.source, vocab=vocab)
    return Converted(model, vocab)


def _vocabulary(source, s: ConvertSettings):
    """The vocabulary to write: ``vocab``, ``vocab_from_corpus``, or (HuggingFace) the file beside the weights."""
    if s.vocab and s.vocab_from_corpus:
        raise ConfigError("--vocab and --vocab-from-corpus: give one of them")
    if s.vocab:
        return _read_vocab_option(s.vocab, s.source == "hf")
    if s.vocab_from_corpus:
        if not s.data_dir:
            raise ConfigError("--vocab-from-corpus: needs --data-dir DIR holding the corpus")
        return original_vocab(s.vocab_from_corpus, s.data_dir)
    if s.source == "hf":
        beside = Path(source).parent
        found = next((beside / n for n in VOCAB_NAMES if (beside / n).is_file()), None)
        if found is not None:
            log.info("vocabulary: %s (beside the weights)", found)
            return read_vocab_file(found, huggingface=True)
    return None


def _read_vocab_option(path, huggingface: bool):
    try:
        return read_vocab_file(path, huggingface=huggingface)
    except DataError as exc:
        raise DataError(f"--vocab: {exc}") from None


def _convert_hf_folder(source, out_dir, s: ConvertSettings) -> Converted:
    """A whole HuggingFace folder or hub id: opened as every command opens it, then written in our format."""
    vocab = _read_vocab_option(s.vocab, True) if s.vocab else None
    check_out_dir(out_dir)
    ckpt = open_checkpoint(source, s.revision, require_tokenizer=False)
    if vocab is not None and len(vocab) != ckpt.model.config.n_token:
        raise ConfigError(f"--vocab: has {len(vocab):,} symbols but the model {ckpt.model.config.n_token:,}")
    vocab = vocab if vocab is not None else (ckpt.tokenizer.vocab if ckpt.tokenizer is not None else None)
    ckpt.model.save_pretrained(out_dir)
    if vocab is not None:
        vocab.save(out_dir)
    return Converted(ckpt.model, vocab)


__all__ = ["ConvertSettings", "Converted", "convert_to_folder"]
