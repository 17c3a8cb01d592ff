"""Fine-tuning: ``train.init_from`` (``txl train --init-from CKPT``) starts a run from a trained checkpoint.

The run keeps the checkpoint's model (its ``config.json``) and vocabulary, and starts a fresh optimiser and
learning-rate schedule at step 0. It may change what does not change the weights' shapes or meaning:
the lengths (``tgt_len``, ``mem_len``, ``ext_len``, ``clamp_len``, ``same_length``), ``dropout`` and
``dropatt``; any other model field that differs from the checkpoint's is refused, naming the field.

The corpus is encoded with the checkpoint's vocabulary, by :func:`transformer_xl.data.load_run_corpus`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

from ..checkpoints.hub import VOCAB_NAMES, Located, locate
from ..checkpoints.loading import model_config
from ..data import load_vocab
from ..errors import CheckpointError, ConfigError, DataError
from ..model.config import TransformerXLConfig

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


def resolve_init_dir(path, revision=None) -> Path:
    """The model folder of ``--init-from``: a folder (ours or HuggingFace's), a run's ``best/`` or last checkpoint,
    or a hub id's snapshot (at ``revision``, ``--init-revision``: a branch, tag or commit; default main)."""
    return _locate(path, revision).directory


def _locate(path, revision):
    return locate(path, None if revision is None else str(revision), label="--init-from: ")


def load_init_source(path, revision=None) -> InitSource:
    """Config and vocabulary of an ``--init-from`` checkpoint (the weights are read later, into the model)."""
    located = _locate(path, revision)
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
