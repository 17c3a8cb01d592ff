"""Convert the authors' TensorFlow Transformer-XL checkpoints (kimiyoung/transformer-xl, ``tf/``).

The TensorFlow code (``tf/model.py``) names its variables under ``transformer/``:

* ``r_w_bias``, ``r_r_bias``: ``[n_layer, H, D]`` with ``--untie_r`` (one slice per layer), else ``[H, D]``;
* ``adaptive_embed/lookup_table`` (+ ``proj_W [d_embed, d_model]``) for ``div_val 1``, else
  ``adaptive_embed/cutoff_{i}/lookup_table`` and ``proj_W [d_embed_i, d_model]`` per cluster;
* ``adaptive_softmax/bias [n_token]`` without cutoffs, else ``adaptive_softmax/cutoff_{i}/b``, an
  untied ``cutoff_{i}/proj [d_embed_i, d_model]``, and ``cutoff_0/cluster_W``, ``cluster_b``; the output
  weights are always the embedding tables (``tie_weight`` is not read by ``model.py``);
* ``layer_{i}/rel_attn/{qkv,r,o}/kernel``, ``layer_{i}/rel_attn/LayerNorm/{gamma,beta}``,
  ``layer_{i}/ff/layer_{1,2}/{kernel,bias}``, ``layer_{i}/ff/LayerNorm/{gamma,beta}``.

Dense kernels are ``[in, out]`` (PyTorch's Linear weight transposed); projections are stored
``[d_embed_i, d_model]`` (this package's ``[d_model, d_embed_i]`` transposed). The TensorFlow code
reads the head log-probability of tail cluster ``i`` from head column ``cutoffs[0] + i - 1``, i.e.
``cluster_W`` row ``i - 1``; the PyTorch original (and this package) read row ``n_clusters - i``, so
``cluster_W``/``cluster_b`` are flipped along the cluster axis. ``tf.contrib.layers.layer_norm``
uses a variance epsilon of 1e-12 (PyTorch's default is 1e-5), which the converted config keeps.
Where ``--proj_same_dim=False`` leaves a cluster without projection, the identity is used.

The conversion maps TensorFlow variables onto the original PyTorch names (which this package
uses) and hands them to :func:`convert_state_dict`, which checks names, shapes and ties again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError
from ..model.config import TransformerXLConfig, read_json_object
from ..model.transformer import TransformerXL
from ..training.run_config import builtin_config_names, load_run_config
from .original import check_out_dir, convert_state_dict
from .tf_checkpoint import TFCheckpoint, is_model_weight

SCOPE = "transformer/"
LAYER_NORM_EPSILON = 1e-12  # tf.contrib.layers.layer_norm's fixed variance_epsilon

# Model flags of the authors' tf/train_gpu.py with their defaults.
FLAG_DEFAULTS = dict(
    n_layer=6, d_model=500, d_embed=500, n_head=10, d_head=50, d_inner=1000, dropout=0.1, dropatt=0.1,
    untie_r=False, tie_weight=True, div_val=1, proj_share_all_but_first=False, proj_same_dim=True,
    tgt_len=70, mem_len=70, same_length=False, clamp_len=-1, init="normal", init_std=0.02,
    proj_init_std=0.01, init_range=0.1,
)
# From corpus-info.json rather than the flags; read from the checkpoint's shapes when absent.
CORPUS_FIELDS = ("n_token", "cutoffs")
# Other flags of train_gpu.py / train.py / data_utils.py: accepted in a flags file and ignored.
IGNORED_FLAGS = {
    "num_hosts", "num_core_per_host", "data_dir", "record_info_dir", "corpus_info_path", "model_dir", "do_train",
    "do_eval", "eval_ckpt_path", "warm_start_path", "learning_rate", "clip", "min_lr_ratio", "warmup_steps",
    "train_batch_size", "eval_batch_size", "train_steps", "iterations", "save_steps", "do_test", "max_eval_batch",
    "do_eval_only", "start_eval_steps", "eval_split", "dataset", "per_host_test_bsz", "per_host_train_bsz",
    "per_host_valid_bsz", "num_passes", "use_tpu", "master", "tpu", "gcp_project", "tpu_zone", "use_bfloat16",
    "vocab_size", "num_shuffle", "bin_sizes", "max_save", "tgt_len_eval",
}
_BOOL_FLAGS = {"untie_r", "tie_weight", "proj_share_all_but_first", "proj_same_dim", "same_length"}
_FLOAT_FLAGS = {"dropout", "dropatt", "init_std", "proj_init_std", "init_range"}


# ---------------------------------------------------------------------------- flags
def read_flags(source) -> Dict:
    """Run flags from a JSON file, a mapping, or the name of a built-in config (``wt103_large`` ...).

    Values may be strings as in the shell scripts (``"True"``, ``"1000"``); a leading ``--`` on a
    name is allowed. Returns the flags with ``None`` for what the checkpoint's shapes must decide.
    """
    if isinstance(source, Mapping):
        return _parse_flags(dict(source), "flags")
    text = str(source)
    if text.endswith(".json") or Path(text).is_file():
        return _parse_flags(read_json_object(text, "run flags"), text)
    return _flags_from_builtin(text)


def _parse_flags(raw: Dict, origin: str) -> Dict:
    raw = {k.lstrip("-"): v for k, v in raw.items()}
    if "n_token" not in raw and "vocab_size" in raw:
        raw["n_token"] = raw["vocab_size"]
    unknown = sorted(set(raw) - set(FLAG_DEFAULTS) - set(CORPUS_FIELDS) - IGNORED_FLAGS)
    if unknown:
        raise ConfigError(f"{origin}: unknown flag(s) {', '.join(unknown)} (model flags: {', '.join(FLAG_DEFAULTS)})")
    flags = {k: _flag_value(k, raw.get(k, v), origin) for k, v in FLAG_DEFAULTS.items()}
    flags["n_token"] = None if raw.get("n_token") is None else _flag_value("n_token", raw["n_token"], origin)
    flags["cutoffs"] = None if raw.get("cutoffs") is None else _cutoffs(raw["cutoffs"], flags["n_token"], origin)
    return flags


def _flag_value(name: str, value, origin: str):
    try:
        if name in _BOOL_FLAGS:
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            if isinstance(value, (bool, int)):
                return bool(value)
            raise ValueError
        if name in _FLOAT_FLAGS:
            return float(value)
        if name == "init":
            return str(value)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{origin}: flag {name} has an invalid value {value!r}") from None


def _cutoffs(value, n_token: Optional[int], origin: str) -> List[int]:
    if isinstance(value, str):
        value = [v for v in value.replace(",", " ").split() if v]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{origin}: cutoffs must be a list of integers, got {value!r}")
    cuts = [_flag_value("cutoffs", v, origin) for v in value]
    # corpus-info.json writes [0, c_1, ..., c_n, n_token]; the model takes [c_1, ..., c_n].
    if cuts and cuts[0] == 0:
        cuts = cuts[1:-1] if (n_token is None or cuts[-1] == n_token) else cuts[1:]
    return cuts


def _flags_from_builtin(name: str) -> Dict:
    if name not in builtin_config_names():
        raise ConfigError(f"--config: {name!r} is neither a JSON file nor a built-in config "
                          f"({', '.join(builtin_config_names())})")
    model = load_run_config(name).model.to_dict()
    flags = {k: v for k, v in FLAG_DEFAULTS.items()}
    defaults = TransformerXLConfig()
    for key in ("n_layer", "d_model", "n_head", "d_head", "d_inner", "dropout", "dropatt", "div_val", "tgt_len",
                "mem_len", "clamp_len", "same_length", "init", "init_std", "proj_init_std", "init_range"):
        flags[key] = model.get(key, getattr(defaults, key))
    flags["d_embed"] = model.get("d_embed") or flags["d_model"]
    flags["cutoffs"] = model.get("cutoffs") or []
    flags["n_token"] = None
    flags["untie_r"] = model.get("untie_r")  # None: as the checkpoint has it
    flags["proj_same_dim"] = None
    ties = list(model.get("tie_projs") or [])[1:]
    if ties and len(set(ties)) > 1:
        raise ConfigError(f"{name}: tie_projs {model['tie_projs']} cannot be expressed with --proj_share_all_but_first")
    flags["proj_share_all_but_first"] = bool(ties and ties[0])
    return flags


# ---------------------------------------------------------------------------- shapes
def _layer_shapes(f: Dict) -> Dict[str, Tuple[int, ...]]:
    d, hd, inner = f["d_model"], f["n_head"] * f["d_head"], f["d_inner"]
    shapes = {}
    for i in range(f["n_layer"]):
        p = f"layer_{i}/"
        shapes.update({
            p + "rel_attn/qkv/kernel": (d, 3 * hd), p + "rel_attn/r/kernel": (d, hd), p + "rel_attn/o/kernel": (hd, d),
            p + "rel_attn/LayerNorm/gamma": (d,), p + "rel_attn/LayerNorm/beta": (d,),
            p + "ff/layer_1/kernel": (d, inner), p + "ff/layer_1/bias": (inner,),
            p + "ff/layer_2/kernel": (inner, d), p + "ff/layer_2/bias": (d,),
            p + "ff/LayerNorm/gamma": (d,), p + "ff/LayerNorm/beta": (d,),
        })
    bias = (f["n_layer"], f["n_head"], f["d_head"]) if f["untie_r"] else (f["n_head"], f["d_head"])
    shapes.update({"r_w_bias": bias, "r_r_bias": bias})
    return shapes


def _has_proj(f: Dict, i: int, d_i: int) -> bool:
    """Whether cluster i's embedding has a ``proj_W`` (mask_adaptive_embedding_lookup's rule)."""
    if f["div_val"] == 1:
        return f["d_embed"] != f["d_model"]
    return not (d_i == f["d_model"] and not f["proj_same_dim"])


def _has_softmax_proj(f: Dict, i: int, d_i: int) -> bool:
    """Whether softmax cluster i has its own ``proj`` (mask_adaptive_logsoftmax's rule)."""
    if f["tie_projs"][i]:
        return False
    return not ((f["div_val"] == 1 or not f["proj_same_dim"]) and d_i == f["d_model"])


def expected_shapes(f: Dict) -> Dict[str, Tuple[int, ...]]:
    """Variable name (without ``transformer/``) -> shape, for complete flags."""
    shapes = _layer_shapes(f)
    bounds = [0] + f["cutoffs"] + [f["n_token"]]
    d_model, d_embed = f["d_model"], f["d_embed"]
    if f["div_val"] == 1:
        shapes["adaptive_embed/lookup_table"] = (f["n_token"], d_embed)
        if _has_proj(f, 0, d_embed):
            shapes["adaptive_embed/proj_W"] = (d_embed, d_model)
    for i in range(len(bounds) - 1):
        d_i = d_embed // (f["div_val"] ** i)
        if f["div_val"] != 1:
            shapes[f"adaptive_embed/cutoff_{i}/lookup_table"] = (bounds[i + 1] - bounds[i], d_i)
            if _has_proj(f, i, d_i):
                shapes[f"adaptive_embed/cutoff_{i}/proj_W"] = (d_i, d_model)
        if not f["cutoffs"]:
            continue
        shapes[f"adaptive_softmax/cutoff_{i}/b"] = (bounds[i + 1] - bounds[i],)
        if _has_softmax_proj(f, i, d_i):
            shapes[f"adaptive_softmax/cutoff_{i}/proj"] = (d_i, d_model)
    if f["cutoffs"]:
        n_clusters = len(f["cutoffs"])
        shapes["adaptive_softmax/cutoff_0/cluster_W"] = (n_clusters, d_embed)
        shapes["adaptive_softmax/cutoff_0/cluster_b"] = (n_clusters,)
    else:
        shapes["adaptive_softmax/bias"] = (f["n_token"],)
    return shapes


def complete_flags(flags: Dict, shapes: Mapping[str, Tuple[int, ...]], origin: str) -> Dict:
    """Fill what the flags leave open (``None``: n_token, cutoffs, untie_r, proj_same_dim) from the shapes."""
    f = dict(flags)
    if f["cutoffs"] is None:
        sizes = []
        while f"adaptive_softmax/cutoff_{len(sizes)}/b" in shapes:
            sizes.append(shapes[f"adaptive_softmax/cutoff_{len(sizes)}/b"][0])
        f["cutoffs"] = [int(c) for c in np.cumsum(sizes)[:-1]]
    if f["n_token"] is None:
        if "adaptive_softmax/bias" in shapes and not f["cutoffs"]:
            f["n_token"] = shapes["adaptive_softmax/bias"][0]
        else:
            i, total = 0, 0
            while f"adaptive_softmax/cutoff_{i}/b" in shapes:
                total += shapes[f"adaptive_softmax/cutoff_{i}/b"][0]
                i += 1
            if total == 0:
                raise CheckpointError(f"{origin}: no adaptive_softmax biases: cannot tell n_token (give it in the "
                                      f"flags)")
            f["n_token"] = total
    if f["untie_r"] is None:
        f["untie_r"] = len(shapes.get("r_w_bias", ())) == 3
    if f["proj_same_dim"] is None:
        f["proj_same_dim"] = not (f["div_val"] != 1 and f["d_embed"] == f["d_model"]
                                  and "adaptive_embed/cutoff_0/proj_W" not in shapes)
    f["tie_projs"] = [False] + [bool(f["proj_share_all_but_first"])] * len(f["cutoffs"])
    if f["div_val"] != 1 and not f["cutoffs"]:
        raise ConfigError(f"{origin}: div_val {f['div_val']} without cutoffs is not a model tf/model.py can run")
    return f


def check_shapes(ckpt_shapes: Mapping[str, Tuple[int, ...]], f: Dict, origin: str) -> None:
    """One line for the first variable missing, unexpected or of another shape than the flags give."""
    expected = expected_shapes(f)
    for name, shape in expected.items():
        if name in ckpt_shapes and tuple(ckpt_shapes[name]) != tuple(shape):
            raise ConfigError(f"{origin}: {SCOPE}{name} has shape {list(ckpt_shapes[name])} in the checkpoint but "
                              f"the flags give {list(shape)}")
    missing = sorted(set(expected) - set(ckpt_shapes))
    extra = sorted(set(ckpt_shapes) - set(expected))
    if missing or extra:
        parts = ([f"missing {len(missing)}: {', '.join(SCOPE + n for n in missing[:4])}"] if missing else []) + \
                ([f"unexpected {len(extra)}: {', '.join(SCOPE + n for n in extra[:4])}"] if extra else [])
        raise ConfigError(f"{origin}: variables do not match the flags: {'; '.join(parts)}")


# ---------------------------------------------------------------------------- mapping
def config_from_flags(f: Dict) -> TransformerXLConfig:
    """Our config for complete flags (see :func:`complete_flags`)."""
    return TransformerXLConfig(
        n_token=f["n_token"], n_layer=f["n_layer"], n_head=f["n_head"], d_model=f["d_model"], d_head=f["d_head"],
        d_inner=f["d_inner"], d_embed=f["d_embed"], div_val=f["div_val"], cutoffs=list(f["cutoffs"]),
        tie_weight=True, tie_projs=f["tie_projs"] if f["cutoffs"] else [True], pre_lnorm=False,
        dropout=f["dropout"], dropatt=f["dropatt"], tgt_len=f["tgt_len"], ext_len=0, mem_len=f["mem_len"],
        clamp_len=f["clamp_len"], same_length=f["same_length"], attn_type=0, untie_r=f["untie_r"], init=f["init"],
        init_range=f["init_range"], init_std=f["init_std"], proj_init_std=f["proj_init_std"],
        layer_norm_epsilon=LAYER_NORM_EPSILON, mem_init="zeros", same_length_extra=1)


def map_variables(tf_vars: Mapping[str, np.ndarray], f: Dict) -> Dict[str, torch.Tensor]:
    """TensorFlow variables (names without ``transformer/``) -> tensors under the original PyTorch names.

    Tied tensors (output weights, shared projections) are given once, under the embedding's name.
    """
    out: Dict[str, torch.Tensor] = {}

    def put(name: str, value, transpose: bool = False) -> None:
        t = torch.from_numpy(np.asarray(value))
        out[name] = t.t() if transpose else t

    for i in range(f["n_layer"]):
        p, q = f"layer_{i}/", f"layers.{i}."
        for tf_name, ours in (("qkv", "qkv_net"), ("r", "r_net"), ("o", "o_net")):
            put(f"{q}dec_attn.{ours}.weight", tf_vars[f"{p}rel_attn/{tf_name}/kernel"], transpose=True)
        for block, ours in (("rel_attn", "dec_attn"), ("ff", "pos_ff")):
            put(f"{q}{ours}.layer_norm.weight", tf_vars[f"{p}{block}/LayerNorm/gamma"])
            put(f"{q}{ours}.layer_norm.bias", tf_vars[f"{p}{block}/LayerNorm/beta"])
        for k, core in ((1, 0), (2, 3)):
            put(f"{q}pos_ff.CoreNet.{core}.weight", tf_vars[f"{p}ff/layer_{k}/kernel"], transpose=True)
            put(f"{q}pos_ff.CoreNet.{core}.bias", tf_vars[f"{p}ff/layer_{k}/bias"])
        if f["untie_r"]:
            put(f"{q}dec_attn.r_w_bias", tf_vars["r_w_bias"][i])
            put(f"{q}dec_attn.r_r_bias", tf_vars["r_r_bias"][i])
    if not f["untie_r"]:
        put("r_w_bias", tf_vars["r_w_bias"])
        put("r_r_bias", tf_vars["r_r_bias"])
    _map_adaptive(tf_vars, f, put)
    return out


def _map_adaptive(tf_vars, f: Dict, put) -> None:
    d_model, d_embed, div_val = f["d_model"], f["d_embed"], f["div_val"]
    n_clusters = len(f["cutoffs"])
    if div_val == 1:
        put("word_emb.emb_layers.0.weight", tf_vars["adaptive_embed/lookup_table"])
        if d_embed != d_model:
            put("word_emb.emb_projs.0", tf_vars["adaptive_embed/proj_W"], transpose=True)
    else:
        for i in range(n_clusters + 1):
            d_i = d_embed // (div_val ** i)
            put(f"word_emb.emb_layers.{i}.weight", tf_vars[f"adaptive_embed/cutoff_{i}/lookup_table"])
            put(f"word_emb.emb_projs.{i}", _proj(tf_vars, f"adaptive_embed/cutoff_{i}/proj_W", d_i, d_model),
                transpose=True)
    if n_clusters == 0:
        put("crit.out_layers.0.bias", tf_vars["adaptive_softmax/bias"])
        return
    # The TF head reads tail cluster i from cluster row i-1, ours from row n_clusters-i: reverse the rows.
    # A real copy: np.ascontiguousarray leaves a one-row reversed view (negative stride) as it is.
    cluster_w = tf_vars["adaptive_softmax/cutoff_0/cluster_W"]  # [n_clusters, d_embed]
    put("crit.cluster_weight", np.flip(cluster_w, 0).copy())
    put("crit.cluster_bias", np.flip(tf_vars["adaptive_softmax/cutoff_0/cluster_b"], 0).copy())  # [n_clusters]
    biases = [tf_vars[f"adaptive_softmax/cutoff_{i}/b"] for i in range(n_clusters + 1)]
    if div_val == 1:
        put("crit.out_layers.0.bias", np.concatenate([np.asarray(b) for b in biases]))
    for i in range(n_clusters + 1):
        d_i = d_embed // (div_val ** i)
        if div_val != 1:
            put(f"crit.out_layers.{i}.bias", biases[i])
        if f["tie_projs"][i] or (div_val == 1 and d_i == d_model):
            continue  # tied to the embedding's projection, or no projection at all
        put(f"crit.out_projs.{i}", _proj(tf_vars, f"adaptive_softmax/cutoff_{i}/proj", d_i, d_model), transpose=True)


def _proj(tf_vars, name: str, d_i: int, d_model: int) -> np.ndarray:
    """A ``[d_i, d_model]`` projection, or the identity where the TF code has none (proj_same_dim=False)."""
    if name in tf_vars:
        return tf_vars[name]
    return np.eye(d_i, d_model, dtype=np.float32)


# ---------------------------------------------------------------------------- entry points
def load_tf_model(ckpt_prefix, flags) -> TransformerXL:
    """A :class:`TransformerXL` holding the weights of a TensorFlow checkpoint.

    ``flags``: a JSON file of the authors' run flags, a mapping, or a built-in config name.
    """
    ckpt = TFCheckpoint(ckpt_prefix)
    origin = str(ckpt.index)
    names = [n for n in ckpt if n.startswith(SCOPE) and is_model_weight(n)]
    if not names:
        found = ", ".join(sorted(ckpt)[:4]) or "nothing"
        raise CheckpointError(f"{origin}: no variable under '{SCOPE}': not a checkpoint of the authors' "
                              f"Transformer-XL (found {found})")
    shapes = {n[len(SCOPE):]: ckpt[n].shape for n in names}
    f = complete_flags(read_flags(flags), shapes, origin)
    check_shapes(shapes, f, origin)
    config = config_from_flags(f)
    tf_vars = {n[len(SCOPE):]: ckpt.read(n) for n in names}
    return convert_state_dict(map_variables(tf_vars, f), config, "original", origin=origin)


def convert_tf_checkpoint(ckpt_prefix, flags, out_dir, vocab=None) -> TransformerXL:
    """Convert a TensorFlow checkpoint into a ``save_pretrained`` directory (+ ``vocab.json``).

    ``vocab``: optional vocabulary (anything with ``save(dir)`` and ``len()``), checked against n_token.
    """

    check_out_dir(out_dir)
    model = load_tf_model(ckpt_prefix, flags)
    if vocab is not None and len(vocab) != model.config.n_token:
        raise ConfigError(f"vocabulary: has {len(vocab)} symbols but the checkpoint has n_token="
                          f"{model.config.n_token}")
    model.save_pretrained(out_dir)
    if vocab is not None:
        vocab.save(out_dir)
    return model


__all__ = ["FLAG_DEFAULTS", "read_flags", "complete_flags", "expected_shapes", "check_shapes", "config_from_flags",
           "map_variables", "load_tf_model", "convert_tf_checkpoint"]
