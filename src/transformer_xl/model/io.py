"""Saving and loading models: ``config.json`` + ``model.safetensors``, no pickle anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Dict

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .. import __version__
from ..errors import CheckpointError, ConfigError
from ..files import atomic_write  # the package's one atomic writer (still importable from here)
from .config import TransformerXLConfig

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def unique_state_dict(model: torch.nn.Module) -> Dict[str, torch.Tensor]:
    """Parameters and persistent buffers, each tied tensor once (under its first name)."""
    tensors = {name: p.detach() for name, p in model.named_parameters()}
    param_names = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    for name, value in model.state_dict(keep_vars=True).items():
        if name not in param_names:  # a persistent buffer
            tensors[name] = value.detach()
    return tensors


def save_pretrained(model, directory) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in unique_state_dict(model).items()}
    meta = {"format": "pt", "library": "transformer-xl", "version": __version__}
    atomic_write(directory / WEIGHTS_NAME, lambda tmp: save_file(tensors, tmp, metadata=meta))
    atomic_write(directory / CONFIG_NAME, model.config.to_json_file)


def load_safetensors(path) -> Dict[str, torch.Tensor]:
    """Read a safetensors file, turning a truncated or foreign file into one clear error."""
    try:
        return load_file(str(path))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({_one_line(exc)})") from None


def load_into(model: torch.nn.Module, tensors: Dict[str, torch.Tensor], source: str) -> None:
    """Copy ``tensors`` into ``model`` after checking names and shapes match exactly."""
    expected = unique_state_dict(model)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        raise CheckpointError(f"{source}: weights do not match the config: {describe_mismatch(missing, extra)}")
    bad = [f"{k} {list(tensors[k].shape)} != {list(v.shape)}" for k, v in expected.items()
           if tuple(tensors[k].shape) != tuple(v.shape)]
    if bad:
        raise CheckpointError(f"{source}: shapes do not match the config: {'; '.join(bad[:8])}")
    with torch.no_grad():
        for name, target in expected.items():
            target.copy_(tensors[name])


def describe_mismatch(missing, extra, limit: int = 8) -> str:
    parts = []
    for label, names in (("missing", missing), ("unexpected", extra)):
        if names:
            shown = ", ".join(names[:limit]) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")
            parts.append(f"{label} {len(names)}: {shown}")
    return "; ".join(parts)


class PretrainedMixin:
    """``save_pretrained`` / ``from_pretrained`` for a model class built from a :class:`TransformerXLConfig`."""

    def save_pretrained(self, directory) -> None:
        save_pretrained(self, directory)

    @classmethod
    def from_pretrained(cls, directory, map_location="cpu"):
        return from_pretrained(directory, cls, map_location=map_location)


def from_pretrained(directory, model_class, map_location="cpu"):
    """Load a ``model_class`` (``TransformerXL``) saved by :func:`save_pretrained`. Bit-exact."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory}: not a transformer-xl checkpoint (no {name})")
    try:
        config = TransformerXLConfig.from_json_file(directory / CONFIG_NAME)
    except ConfigError as exc:
        raise CheckpointError(f"{directory / CONFIG_NAME}: {exc}") from None
    model = model_class(config)
    load_into(model, load_safetensors(directory / WEIGHTS_NAME), str(directory / WEIGHTS_NAME))
    return model.to(map_location)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
