"""Finding and loading what the commands work on: a run or checkpoint directory, its config, vocabulary and corpus.
"""

from __future__ import annotations

from pathlib import Path


from ..data import load_vocab
from ..errors import CheckpointError, ConfigError, DataError
from ..model import TransformerXL, TransformerXLConfig
from ..training import checkpoint as ckpt
from ..training.loop import RUN_CONFIG_NAME, resolve_device


def resolve_checkpoint(path) -> Path:
    """A model directory: the path itself, or a run's ``best/``, or its last checkpoint."""
    return ckpt.resolve_model_dir(path)


def find_run_config(model_dir: Path) -> Path:
    for candidate in (model_dir / RUN_CONFIG_NAME, model_dir.parent / RUN_CONFIG_NAME,
                      model_dir.parent.parent / RUN_CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise CheckpointError(f"{model_dir}: no {RUN_CONFIG_NAME} beside the checkpoint, so its corpus is unknown")


def check_vocab(model_dir: Path, corpus) -> None:
    saved = load_vocab(model_dir)
    if len(saved) != len(corpus.vocab) or saved.to_dict() != corpus.vocab.to_dict():
        raise DataError(f"{model_dir}: the checkpoint's vocabulary ({len(saved)} symbols) does not match the "
                        f"corpus' ({len(corpus.vocab)} symbols)")


def load_model_config(model_dir: Path) -> TransformerXLConfig:
    """The checkpoint's config.json, read without loading the weights."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{model_dir}: not a transformer-xl checkpoint (no config.json)")
    try:
        return TransformerXLConfig.from_json_file(path)
    except ConfigError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def load_model_and_vocab(path, device="auto", tgt_len=None, mem_len=None):
    model_dir = resolve_checkpoint(path)
    device = resolve_device(device)
    config = load_model_config(model_dir)
    config.replace(tgt_len=tgt_len or config.tgt_len,  # ConfigError naming the field, before the weights load
                   mem_len=config.mem_len if mem_len is None else mem_len)
    try:
        vocab = load_vocab(model_dir)
    except DataError as exc:
        raise CheckpointError(f"{model_dir}: the checkpoint has no usable vocabulary ({exc})") from None
    if len(vocab) != config.n_token:
        raise CheckpointError(f"{model_dir}: vocabulary of {len(vocab)} symbols for a model of {config.n_token}")
    model = TransformerXL.from_pretrained(model_dir, map_location=device).eval()
    model.reset_length(tgt_len or model.tgt_len, 0, model.mem_len if mem_len is None else mem_len)
    return model, vocab


def weight_bytes(model) -> int:
    """Bytes of the loaded weights (already resident, so not counted again against the free memory)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
