"""Convert state dicts of the original Transformer-XL PyTorch code and of HuggingFace's port.

Both name parameters as this package does (``word_emb.emb_layers.N``, ``layers.N.dec_attn.qkv_net``,
``crit.out_projs.N`` ...); HuggingFace's ``TransfoXLLMHeadModel`` puts everything but ``crit`` under
``transformer.``. What a conversion does:

* builds a :class:`TransformerXLConfig` from the constructor arguments (original names) or from a
  HuggingFace ``config.json``;
* strips the ``transformer.`` prefix (``hf``), drops ``pos_emb.inv_freq`` after checking it is the
  standard sinusoid buffer, and drops tied duplicates (output weights and projections shared with
  the input embedding) after checking they are equal to the tensor they are tied to;
* checks that names and shapes match the config exactly, listing what is missing or extra.

Files are read with ``safetensors`` or ``torch.load(weights_only=True)``: never a full unpickle.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Dict, Mapping, Tuple

import torch

from ..errors import CheckpointError, ConfigError
from ..model.config import TransformerXLConfig, read_json_object
from ..model.io import describe_mismatch, load_into, load_safetensors, unique_state_dict
from ..model.transformer import TransformerXL

SOURCES = ("original", "hf")
HF_PREFIX = "transformer."

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
    if source not in SOURCES:
        raise ConfigError(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")
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
    if source not in SOURCES:
        raise ConfigError(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")
    tensors = _strip_prefix(state_dict, source, origin)
    _check_inv_freq(tensors, config, origin)
    model = TransformerXL(config)
    _drop_tied(tensors, model, origin)
    load_into(model, tensors, origin)
    return model.eval()


def _strip_prefix(state_dict: Mapping[str, torch.Tensor], source: str, origin: str) -> Dict[str, torch.Tensor]:
    if source == "original":
        return dict(state_dict)
    if not any(k.startswith(HF_PREFIX) for k in state_dict):
        raise CheckpointError(f"{origin}: no key starts with '{HF_PREFIX}'; is this a HuggingFace "
                              f"TransfoXLLMHeadModel state dict? (try --from original)")
    # ``crit.*`` has no prefix; anything else without it is reported by the name check.
    return {(k[len(HF_PREFIX):] if k.startswith(HF_PREFIX) else k): v for k, v in state_dict.items()}


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
    if source not in SOURCES:
        raise ConfigError(f"source: must be one of {', '.join(SOURCES)}, got {source!r}")
    cfg = model.config
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if cfg.attn_type in (0, 2):
        state["pos_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0.0, cfg.d_model, 2.0) / cfg.d_model))
    args = {k: getattr(cfg, k) for k in _DIRECT_FIELDS}
    args.update(tie_weight=cfg.tie_weight, tie_projs=list(cfg.tie_projs), sample_softmax=-1)
    if source == "hf":
        state = {(k if k.startswith("crit.") else HF_PREFIX + k): v for k, v in state.items()}
        args["vocab_size"] = args.pop("n_token")
        args["tie_word_embeddings"] = args.pop("tie_weight")
        args["adaptive"] = True
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
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable state dict ({_first_line(exc)})") from None
    if not isinstance(obj, Mapping) or not obj or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        kind = type(obj).__name__ if not isinstance(obj, Mapping) else "a mapping that is not name -> tensor"
        raise CheckpointError(f"{path}: not a state dict (found {kind})")
    return dict(obj)


def convert_checkpoint(state_dict_path, args_path, out_dir, source: str = "original") -> TransformerXL:
    """Convert a checkpoint file into a ``save_pretrained`` directory; returns the model."""
    config = config_from_args(read_json_object(args_path, "constructor arguments"), source)
    state = load_state_dict_file(state_dict_path)
    model = convert_state_dict(state, config, source, origin=str(state_dict_path))
    model.save_pretrained(out_dir)
    return model


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return lines[0].split(". ")[0][:200]


__all__ = [
    "config_from_args", "convert_state_dict", "export_state_dict", "load_state_dict_file", "convert_checkpoint",
    "describe_mismatch", "unique_state_dict",
]
