"""Training checkpoints: everything needed to continue a run exactly, in safe formats.

A checkpoint is a directory ``RUN_DIR/checkpoints/step_00000400/`` holding

* ``config.json`` + ``model.safetensors``: the model, loadable with ``TransformerXL.from_pretrained``;
* ``vocab.json`` (or the vocabulary files the corpus writes) and ``run.yaml``: how to rebuild the data;
* ``optimizer.safetensors`` + ``optimizer.json``: optimiser tensors, and its non-tensor state;
* ``state.safetensors``: RNG states and the memories of every batch chunk;
* ``trainer_state.json``: step, epoch, data position, best validation loss, grad-scaler state.

The directory is written under a temporary name and renamed into place, and ``trainer_state.json``
is written last, so a crash (even SIGKILL) at any moment leaves either the previous checkpoints
alone or a complete new one; a half-written directory is never picked up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from safetensors.torch import save_file

from ..errors import CheckpointError
from ..model.io import CONFIG_NAME, WEIGHTS_NAME, atomic_write, load_safetensors

STEP_DIR = re.compile(r"^step_(\d{8})$")
TRAINER_STATE = "trainer_state.json"


# ---------------------------------------------------------------------------- optimiser state
def optimizer_to_safe(optimizer: torch.optim.Optimizer) -> Tuple[Dict[str, torch.Tensor], dict]:
    """Split an optimiser state dict into tensors (for safetensors) and JSON-able values."""
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for idx, state in sd["state"].items():
        for key, value in state.items():
            if torch.is_tensor(value):
                tensors[f"state.{idx}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars[f"{idx}.{key}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def optimizer_from_safe(tensors: Dict[str, torch.Tensor], meta: dict) -> dict:
    state: Dict[int, Dict[str, Any]] = {}
    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    for name, value in meta.get("scalars", {}).items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


# ---------------------------------------------------------------------------- RNG and memories
def rng_state() -> Dict[str, torch.Tensor]:
    tensors = {"rng.torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = s
    return tensors


def set_rng_state(tensors: Dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(tensors["rng.torch"])
    cuda = sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])


def mems_to_tensors(chunk_mems: List[Optional[List[torch.Tensor]]]) -> Dict[str, torch.Tensor]:
    out = {}
    for c, mems in enumerate(chunk_mems):
        for layer, m in enumerate(mems or []):
            out[f"mems.{c}.{layer}"] = m.detach().contiguous().cpu()
    return out


def mems_from_tensors(tensors: Dict[str, torch.Tensor], n_chunks: int, device) -> List[Optional[List[torch.Tensor]]]:
    chunks: List[Optional[List[torch.Tensor]]] = []
    for c in range(n_chunks):
        layers = sorted((k for k in tensors if k.startswith(f"mems.{c}.")), key=lambda k: int(k.rsplit(".", 1)[1]))
        chunks.append([tensors[k].to(device) for k in layers] or None)
    return chunks


# ---------------------------------------------------------------------------- write / read
def write_json(path: Path, value: Any) -> None:
    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(value, fh, indent=2, sort_keys=True)
            fh.write("\n")

    atomic_write(path, write)


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from None


def save_checkpoint(run_dir: Path, step: int, model, optimizer, trainer_state: dict, chunk_mems,
                    write_extra, keep: int) -> Path:
    """Write checkpoint ``step`` atomically, then keep only the newest ``keep`` checkpoints.

    ``write_extra(directory)`` writes the vocabulary and run config into the directory.
    """
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f".tmp_step_{step:08d}_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    model.save_pretrained(tmp)
    write_extra(tmp)
    opt_tensors, opt_meta = optimizer_to_safe(optimizer)
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    write_json(tmp / "optimizer.json", opt_meta)
    save_file({**rng_state(), **mems_to_tensors(chunk_mems)}, str(tmp / "state.safetensors"))
    write_json(tmp / TRAINER_STATE, trainer_state)  # last: marks the directory complete
    _fsync_dir(tmp)
    if final.exists():  # re-saving the same step (e.g. after a resume): replace it
        old = root / f".old_step_{step:08d}_{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    for stale in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(stale, ignore_errors=True)
    return final


def list_checkpoints(run_dir) -> List[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if STEP_DIR.match(p.name) and (p / TRAINER_STATE).is_file()]
    return sorted(found, key=lambda p: int(STEP_DIR.match(p.name).group(1)))


def latest_checkpoint(run_dir) -> Optional[Path]:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def load_training_state(directory: Path, optimizer, device) -> Tuple[dict, List]:
    """Restore optimiser and RNG state from a checkpoint; returns (trainer_state, tensors of state.safetensors)."""
    directory = Path(directory)
    trainer_state = read_json(directory / TRAINER_STATE)
    meta = read_json(directory / "optimizer.json")
    opt_tensors = load_safetensors(directory / "optimizer.safetensors")
    try:
        optimizer.load_state_dict(optimizer_from_safe(opt_tensors, meta))
    except (ValueError, KeyError, RuntimeError) as exc:
        raise CheckpointError(f"{directory}: optimizer state does not match this model ({exc})") from None
    state = load_safetensors(directory / "state.safetensors")
    set_rng_state(state)
    return trainer_state, state


def copy_as_best(source: Path, run_dir: Path, names) -> Path:
    """Replace ``RUN_DIR/best`` by a copy of the given files of a checkpoint, atomically."""
    best = Path(run_dir) / "best"
    tmp = Path(run_dir) / f".tmp_best_{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    for name in names:
        if (source / name).exists():
            shutil.copy2(source / name, tmp / name)
    if best.exists():
        old = Path(run_dir) / f".old_best_{os.getpid()}"
        os.replace(best, old)
        os.replace(tmp, best)
        shutil.rmtree(old)
    else:
        os.replace(tmp, best)
    return best


def is_model_dir(path: Path) -> bool:
    return (Path(path) / CONFIG_NAME).is_file() and (Path(path) / WEIGHTS_NAME).is_file()


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
