"""Saving and loading models: ``config.json`` + ``model.safetensors``, no pickle anywhere.

:func:`from_pretrained` opens whatever :func:`transformer_xl.hub.locate` finds: a folder of ours, a run
directory, a HuggingFace ``TransfoXLLMHeadModel`` folder (converted in memory, see :mod:`.layouts`) or a hub id.
HuggingFace's ``pytorch_model.bin`` is read with ``torch.load(weights_only=True)``: never a full unpickle.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Dict, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .. import __version__
from ..errors import CheckpointError, ConfigError, one_line
from ..files import atomic_write  # the package's one atomic writer (still importable from here)
from ..hub import CONFIG_NAME, WEIGHTS_NAME, Located, locate
from .config import TransformerXLConfig
from .layouts import config_from_hf, prepare_state_dict


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
        raise CheckpointError(f"{path}: not a readable safetensors file ({one_line(exc)})") from None


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
    def from_pretrained(cls, name_or_path, revision: Optional[str] = None, map_location="cpu", *, cache_dir=None,
                        token=None, local_files_only: bool = False):
        """The model named by ``name_or_path``, in evaluation mode (as HuggingFace's ``from_pretrained``).

        ``name_or_path``: a folder saved by :meth:`save_pretrained`, a run directory (its ``best/``, else its
        last checkpoint), a HuggingFace TransfoXL folder (converted in memory), or a hub id ``org/name``
        (``revision``: a branch, tag or commit; ``cache_dir``, ``token``, ``local_files_only`` go to
        ``huggingface_hub``, which also honours ``HF_HUB_OFFLINE`` and ``HF_TOKEN``). One
        :class:`~transformer_xl.errors.CheckpointError` line when it cannot be opened.
        """
        located = locate(name_or_path, revision, parts=("config", "weights"), cache_dir=cache_dir, token=token,
                         local_files_only=local_files_only)
        return load_located(located, cls, map_location)


def from_pretrained(directory, model_class, map_location="cpu"):
    """``model_class.from_pretrained(directory)`` for a local folder or run directory."""
    return load_located(locate(directory, parts=("config", "weights")), model_class, map_location)


def model_config(located: Located) -> TransformerXLConfig:
    """The config of a located model, of either layout (one CheckpointError line naming the file)."""
    try:
        if located.format == "hf":
            return config_from_hf(located.config)
        return TransformerXLConfig.from_dict(located.config)
    except ConfigError as exc:
        raise CheckpointError(f"{located.config_path}: {exc}") from None


def load_located(located: Located, model_class, map_location="cpu"):
    """Build ``model_class`` from a located folder and read its weights; evaluation mode. Bit-exact for our
    own folders; HuggingFace folders are mapped by :func:`~.layouts.prepare_state_dict`."""
    model = model_class(model_config(located))
    load_into(model, read_weights(located, model), str(located.weights_path))
    return model.to(map_location).eval()


def read_weights(located: Located, model) -> Dict[str, torch.Tensor]:
    """The located weights under ``model``'s names (HuggingFace's mapped), ready for :func:`load_into`."""
    weights = located.weights_path
    if located.format == "txl":
        if weights.name != WEIGHTS_NAME:
            raise CheckpointError(f"{located.directory}: not a transformer-xl checkpoint (no {WEIGHTS_NAME})")
        return load_safetensors(weights)
    return prepare_state_dict(load_state_dict_file(weights), model, "hf", str(weights))


def load_state_dict_file(path) -> Dict[str, torch.Tensor]:
    """Read a ``.safetensors`` or ``.bin``/``.pt`` state dict without unpickling arbitrary objects."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: file not found")
    if path.suffix == ".safetensors":
        return load_safetensors(path)
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols; we report one line
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a foreign or damaged file can make torch's restricted unpickler raise anything
        reason = one_line(exc, first=True, limit=200).split(". ")[0]
        raise CheckpointError(f"{path}: not a readable state dict ({type(exc).__name__}: {reason})") from None
    if not isinstance(obj, Mapping) or not obj or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        kind = type(obj).__name__ if not isinstance(obj, Mapping) else "a mapping that is not name -> tensor"
        raise CheckpointError(f"{path}: not a state dict (found {kind})")
    return dict(obj)

