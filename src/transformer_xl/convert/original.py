"""Convert state dicts of the original Transformer-XL PyTorch code and of HuggingFace's port.

The original code names parameters as this package does (``word_emb.emb_layers.N``,
``layers.N.dec_attn.qkv_net``, ``crit.out_projs.N`` ...); HuggingFace's layout is mapped onto it first
(:mod:`transformer_xl.convert.hf`). What a conversion does:

* builds a :class:`TransformerXLConfig` from the constructor arguments (original names) or from a
  HuggingFace ``config.json`` (HuggingFace's defaults for missing keys);
* drops ``pos_emb.inv_freq`` after checking it is the standard sinusoid buffer, and drops tied duplicates
  (output weights and projections shared with the input embedding, HuggingFace's per-layer copies of a
  shared u and v) after checking they are equal to the tensor they are tied to;
* checks that names and shapes match the config exactly, listing what is missing or extra.

Files are read with ``safetensors`` or ``torch.load(weights_only=True)``: never a full unpickle.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Dict, Mapping, Tuple

import torch

from ..errors import CheckpointError, ConfigError
from ..model.config import TransformerXLConfig, read_json_object
from ..files import atomic_write, atomic_write_text
from ..model.io import describe_mismatch, load_into, load_safetensors, unique_state_dict
from ..model.transformer import TransformerXL
from . import hf

SOURCES = ("original", "hf")

# Constructor / training-script arguments of the original code, and HuggingFace config keys,
# that map one to one onto config fields.
_DIRECT_FIELDS = (
    "n_token", "n_layer", "n_head", "d_model", "d_head", "d_inner", "d_embed", "div_val", "cutoffs",
    "pre_lnorm", "dropout", "dropatt", "tgt_len", "ext_len", "mem_len", "clamp_len", "same_length",
    "attn_type", "untie_r", "init", "init_range", "init_std", "proj_init_std", "layer_norm_epsilon",
)


# ---------------------------------------------------------------------------- arguments -> config
def config_from_args(args: Mapping, source: str) -> TransformerXLConfig:
    """Build a config from the original constructor arguments or a HuggingFace config dict."""
    _check_source(source)
    if source == "hf":
        return hf.config_from_hf(args)
    values = {k: args[k] for k in _DIRECT_FIELDS if k in args and args[k] is not None}
    if "n_token" not in values and "vocab_size" in args:
        values["n_token"] = args["vocab_size"]
    if "n_token" not in values:
        raise ConfigError("n_token: missing from the arguments (HuggingFace configs call it vocab_size)")
    if int(args.get("sample_softmax", -1) or -1) > 0:
        raise ConfigError("sample_softmax: sampled softmax checkpoints are not supported (use the adaptive softmax)")
    if args.get("adaptive") is False:
        values["cutoffs"] = []
    values["tie_weight"] = _tie_weight(args)
    values["tie_projs"] = _tie_projs(args, len(values.get("cutoffs") or []))
    values.setdefault("tgt_len", 128)
    values.setdefault("ext_len", 0)
    values.setdefault("mem_len", 0)
    return TransformerXLConfig(**values)


def _tie_weight(args: Mapping) -> bool:
    for key in ("tie_weight", "tie_word_embeddings"):
        if key in args:
            return bool(args[key])
    if "not_tied" in args:
        return not args["not_tied"]
    return True


def _tie_projs(args: Mapping, n_cutoffs: int):
    if args.get("tie_projs") is not None:
        return [bool(t) for t in args["tie_projs"]]
    if "proj_share_all_but_first" in args:
        return [False] + [bool(args["proj_share_all_but_first"])] * n_cutoffs
    return [False]


# ---------------------------------------------------------------------------- state dict -> ours
def convert_state_dict(state_dict: Mapping[str, torch.Tensor], config: TransformerXLConfig, source: str,
                       origin: str = "state dict") -> TransformerXL:
    """A :class:`TransformerXL` holding the weights of an original or HuggingFace state dict."""
    _check_source(source)
    tensors = hf.from_hf_state_dict(state_dict, config, origin) if source == "hf" else dict(state_dict)
    _check_inv_freq(tensors, config, origin)
    model = TransformerXL(config)
    _drop_tied(tensors, model, origin)
    load_into(model, tensors, origin)
    return model.eval()


def _check_inv_freq(tensors: Dict[str, torch.Tensor], config: TransformerXLConfig, origin: str) -> None:
    inv_freq = tensors.pop("pos_emb.inv_freq", None)
    if inv_freq is None:
        return
    expected = 1.0 / (10000 ** (torch.arange(0.0, config.d_model, 2.0) / config.d_model))
    if inv_freq.shape != expected.shape or not torch.allclose(inv_freq.float(), expected, rtol=1e-5, atol=0):
        raise CheckpointError(f"{origin}: pos_emb.inv_freq is not the standard sinusoid buffer for d_model={config.d_model}")


def _drop_tied(tensors: Dict[str, torch.Tensor], model: TransformerXL, origin: str) -> None:
    """Remove names that are aliases of another parameter in ``model``, checking equal values."""
    owner = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        owner.setdefault(id(p), name)
    for name, p in model.named_parameters(remove_duplicate=False):
        first = owner[id(p)]
        if name == first or name not in tensors:
            continue
        if first in tensors and not torch.equal(tensors[first], tensors[name]):
            raise CheckpointError(f"{origin}: {name} should be tied to {first} by the config but differs from it")
        if first not in tensors:
            tensors[first] = tensors[name]
        del tensors[name]


# ---------------------------------------------------------------------------- ours -> state dict
def export_state_dict(model: TransformerXL, source: str) -> Tuple[Dict[str, torch.Tensor], dict]:
    """The state dict and arguments the original code (or HuggingFace) would hold for ``model``.

    Tied tensors appear under every name, as ``torch.nn.Module.state_dict`` writes them.
    """
    _check_source(source)
    cfg = model.config
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if cfg.attn_type in (0, 2):
        state["pos_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0.0, cfg.d_model, 2.0) / cfg.d_model))
    if source == "hf":
        return hf.to_hf_state_dict(state, cfg), hf.config_to_hf(cfg)
    args = {k: getattr(cfg, k) for k in _DIRECT_FIELDS}
    args.update(tie_weight=cfg.tie_weight, tie_projs=list(cfg.tie_projs), sample_softmax=-1)
    return state, args


# ---------------------------------------------------------------------------- files
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
        raise CheckpointError(f"{path}: not a readable state dict ({type(exc).__name__}: {_first_line(exc)})") from None
    if not isinstance(obj, Mapping) or not obj or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        kind = type(obj).__name__ if not isinstance(obj, Mapping) else "a mapping that is not name -> tensor"
        raise CheckpointError(f"{path}: not a state dict (found {kind})")
    return dict(obj)


def convert_checkpoint(state_dict_path, args_path, out_dir, source: str = "original", vocab=None) -> TransformerXL:
    """Convert a checkpoint file into a ``save_pretrained`` directory; returns the model.

    ``vocab`` (a tokenizer of :mod:`transformer_xl.data`, e.g. from ``read_hf_vocab`` or ``original_vocab``)
    is checked against ``n_token`` before anything is written, and saved beside the weights as vocab.json.
    """
    check_out_dir(out_dir)
    config = config_from_args(read_json_object(args_path, "constructor arguments"), source)
    if vocab is not None and len(vocab) != config.n_token:
        raise CheckpointError(f"{args_path}: the vocabulary has {len(vocab):,} symbols but the model "
                              f"{config.n_token:,} (n_token/vocab_size)")
    state = load_state_dict_file(state_dict_path)
    model = convert_state_dict(state, config, source, origin=str(state_dict_path))
    model.save_pretrained(out_dir)
    if vocab is not None:
        vocab.save(out_dir)
    return model


def export_checkpoint(model: TransformerXL, out_dir, target: str = "hf") -> Path:
    """Write ``model`` as the original code or HuggingFace would hold it: ``model.safetensors`` plus
    ``config.json`` (``hf``: loads with ``TransfoXLLMHeadModel.from_pretrained``) or ``args.json``
    (``original``: the constructor arguments). Tied tensors are written under every name."""
    from safetensors.torch import save_file


    state, args = export_state_dict(model, target)
    out = check_out_dir(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().clone() for k, v in state.items()}  # no shared storage
    atomic_write(out / "model.safetensors", lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    text = json.dumps(args, indent=2, sort_keys=True) + "\n"
    atomic_write_text(out / ("config.json" if target == "hf" else "args.json"), text)
    return out


def check_out_dir(out_dir) -> Path:
    """The output directory, refused with one line if it cannot be one (a file, or under a file)."""
    out = Path(out_dir)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                raise CheckpointError(f"{out}: {'is' if p == out else f'{p} is'} a file, not a directory")
            if not os.access(p, os.W_OK):
                raise CheckpointError(f"{out}: {p} is not writable")
            break
    return out


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ConfigError(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return lines[0].split(". ")[0][:200]


__all__ = [
    "config_from_args", "export_checkpoint", "convert_state_dict", "export_state_dict", "load_state_dict_file", "convert_checkpoint",
    "describe_mismatch", "unique_state_dict",
]
