"""Training checkpoints: everything needed to continue a run exactly, in safe formats.

A checkpoint is a directory ``RUN_DIR/checkpoints/step_00000400/`` holding

* ``config.json`` + ``model.safetensors``: the model, loadable with ``TransformerXL.from_pretrained``;
* ``vocab.json`` (or the vocabulary files the corpus writes) and ``run.yaml``: how to rebuild the data;
* ``optimizer.safetensors`` + ``optimizer.json``: optimiser tensors, and its non-tensor state;
* ``state.safetensors``: RNG states (every rank's, in a distributed run) and the memories, one row per
  global batch row (``mems.{layer}``: ``[B, M, d_model]``), whatever the world size and ``batch_chunk``;
* ``trainer_state.json``: step, epoch, data position, best validation loss and its step, grad-scaler state;
* ``COMPLETE``: the completeness marker, written last. Only a directory holding it counts as a checkpoint.

In a distributed run rank 0 writes the checkpoint alone, from full (unsharded) tensors gathered from the
other ranks; any world size that divides the global batch can resume it.

The directory is written under a temporary name (``.tmp_step_N_PID``), the marker last, and renamed into
place; pruning removes the marker first. So a crash (even SIGKILL) at any moment leaves the previous
checkpoints and at most one complete new one; a half-written or half-pruned directory never counts.
``RUN_DIR/best/`` is a copy of the model files of the checkpoint with the lowest validation loss, with
``best.json`` naming its step; :func:`repair_best` makes it agree with the trainer state on resume.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from safetensors.torch import save_file

from .. import files
from ..checkpoints.hub import (
    COMPLETE,
    CONFIG_NAME,
    STEP_DIR,
    WEIGHTS_NAME,
    checkpoint_step,
    checkpoints_dir,
    is_model_dir,
    latest_checkpoint,
    list_checkpoints,
)
from ..checkpoints.loading import load_safetensors
from ..errors import CheckpointError, ConfigError
from ..files import atomic_write, write_json
from ..version import __version__

TRAINER_STATE = "trainer_state.json"
BEST_INFO = "best.json"  # in best/: {"step": N, "valid_loss": x}
TRAINING_ONLY = ("optimizer.safetensors", "optimizer.json", "state.safetensors", TRAINER_STATE, COMPLETE)
TEMPORARY = re.compile(r"^(\.tmp|\.old_|\.prune_).*|^\..*\.tmp$")  # our temporary files and folders


# ---------------------------------------------------------------------------- optimiser state
def optimizer_to_safe(sd: dict) -> Tuple[Dict[str, torch.Tensor], dict]:
    """Split an optimiser state dict (keyed by parameter index) into tensors (for safetensors) and JSON values."""
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


def mems_to_tensors(mems: Optional[List[torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """``n_layer x [B, M, d]`` memory of the global batch rows -> ``{'mems.{layer}': ...}``."""
    return {f"mems.{layer}": m.detach().contiguous().cpu() for layer, m in enumerate(mems or [])}


def _global_mems(tensors: Dict[str, torch.Tensor]) -> List[torch.Tensor]:
    """Per-layer memory of all global rows; older checkpoints stored one memory per chunk (``mems.{c}.{layer}``),
    chunks in row order, which concatenate to the same thing."""
    names = [k.split(".")[1:] for k in tensors if k.startswith("mems.")]
    if all(len(n) == 1 for n in names):
        return [tensors[f"mems.{i}"] for i in sorted(int(n[0]) for n in names)]
    n_chunks = 1 + max(int(c) for c, _ in names)
    n_layer = 1 + max(int(i) for _, i in names)
    return [torch.cat([tensors[f"mems.{c}.{i}"] for c in range(n_chunks)], dim=0) for i in range(n_layer)]


def mems_from_tensors(tensors: Dict[str, torch.Tensor], batch_size: int, rows: slice, n_chunks: int,
                      device) -> List[Optional[List[torch.Tensor]]]:
    """The memories of one rank's ``rows`` of the global batch, split into its ``n_chunks`` chunks."""
    layers = _global_mems(tensors)
    if not layers:
        return [None] * n_chunks
    if layers[0].size(0) != batch_size:
        raise CheckpointError(f"memory holds {layers[0].size(0)} batch rows, the global batch_size is {batch_size}")
    mine = [m[rows].to(device) for m in layers]
    return [list(parts) for parts in zip(*(m.chunk(n_chunks, dim=0) for m in mine))]


# ---------------------------------------------------------------------------- write / read
def save_tensors(path: Path, tensors: Dict[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    """A safetensors file, written atomically with the umask's mode (safetensors alone creates 0600 files)."""
    atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))


def read_json(path: Path) -> Any:
    return files.read_json(path, "checkpoint file", CheckpointError)


def save_model_tensors(directory: Path, config, tensors: Dict[str, torch.Tensor]) -> None:
    """The files of ``save_pretrained`` from full weights held apart from a module (e.g. gathered from FSDP shards)."""

    meta = {"format": "pt", "library": "transformer-xl", "version": __version__}
    save_tensors(Path(directory) / WEIGHTS_NAME, tensors, meta)
    atomic_write(Path(directory) / CONFIG_NAME, config.to_json_file)


def save_checkpoint(run_dir: Path, step: int, write_model, optimizer_state: dict, trainer_state: dict,
                    state_tensors: Dict[str, torch.Tensor], write_extra, keep: int) -> Path:
    """Write checkpoint ``step`` atomically, then keep only the newest ``keep`` checkpoints.

    ``write_model(directory)`` writes ``config.json`` and ``model.safetensors``, ``write_extra(directory)`` the
    vocabulary and run config; ``state_tensors`` are the RNG states and memories.
    """
    root = checkpoints_dir(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = _replace_dir(root / f"step_{step:08d}",  # re-saving a step (e.g. after a resume) replaces it
                         lambda tmp: _write_checkpoint_dir(tmp, write_model, optimizer_state, trainer_state,
                                                           state_tensors, write_extra))
    prune_checkpoints(run_dir, keep)
    return final


def _replace_dir(final: Path, fill) -> Path:
    """Build a folder under a temporary name beside ``final`` (``.tmp_NAME_PID``: ``fill(tmp)`` writes into it,
    new and empty), then rename it into place. A ``final`` already there is unmarked (a checkpoint loses its
    marker first), moved aside (``.old_NAME_PID``) and removed once the new one is in place. On any failure the
    temporary folder is removed. Both names match :data:`TEMPORARY`, which a later run clears."""
    tmp = final.with_name(f".tmp_{final.name}_{os.getpid()}")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        fill(tmp)
        if final.exists():
            old = final.with_name(f".old_{final.name}_{os.getpid()}")
            _unmark(final)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _write_checkpoint_dir(tmp: Path, write_model, optimizer_state: dict, trainer_state: dict,
                          state_tensors: Dict[str, torch.Tensor], write_extra) -> None:
    write_model(tmp)
    write_extra(tmp)
    opt_tensors, opt_meta = optimizer_to_safe(optimizer_state)
    save_tensors(tmp / "optimizer.safetensors", opt_tensors)
    write_json(tmp / "optimizer.json", opt_meta)
    save_tensors(tmp / "state.safetensors", state_tensors)
    write_json(tmp / TRAINER_STATE, trainer_state)
    _fsync_dir(tmp)
    write_json(tmp / COMPLETE, {"step": trainer_state["step"]})  # last: marks the directory complete
    _fsync_dir(tmp)


def _unmark(directory: Path) -> None:
    """Remove a checkpoint's marker (first, before anything else of it goes), durably."""
    try:
        os.unlink(directory / COMPLETE)
    except FileNotFoundError:
        return
    _fsync_dir(directory)


def prune_checkpoints(run_dir, keep: int) -> None:
    """Keep the newest ``keep`` complete checkpoints; remove older ones and incomplete leftovers older than them.

    Each is unmarked first, so a kill in the middle of ``rmtree`` leaves a directory that no longer counts.
    """
    complete = list_checkpoints(run_dir)
    if not complete:
        return
    oldest_kept = checkpoint_step(complete[-keep]) if len(complete) >= keep else checkpoint_step(complete[0])
    for stale in complete[:-keep]:
        _unmark(stale)
        shutil.rmtree(stale, ignore_errors=True)
    for leftover in incomplete_checkpoints(run_dir):
        if checkpoint_step(leftover) < oldest_kept:
            shutil.rmtree(leftover, ignore_errors=True)


def incomplete_checkpoints(run_dir) -> List[Path]:
    """``step_N`` directories without the marker (half-pruned, or written by a version without markers)."""
    root = checkpoints_dir(run_dir)
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if STEP_DIR.match(p.name) and p.is_dir() and not (p / COMPLETE).exists()),
                  key=checkpoint_step)


def remove_half_pruned(run_dir) -> List[Path]:
    """Delete unmarked ``step_N`` directories older than the newest complete checkpoint (a pruning cut short);
    the removed paths. Only call this while holding the run's lock."""
    complete = list_checkpoints(run_dir)
    if not complete:
        return []
    newest = checkpoint_step(complete[-1])
    removed = [p for p in incomplete_checkpoints(run_dir) if checkpoint_step(p) < newest]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def remove_temporaries(run_dir) -> List[Path]:
    """Delete what killed runs leave behind (``.tmp_step_*``, ``.old_best_*``, ``.*.tmp`` ...); the removed paths.

    Only call this while holding the run's lock: nobody else may be writing there.
    """
    removed = []
    for folder in (Path(run_dir), checkpoints_dir(run_dir)):
        if not folder.is_dir():
            continue
        for path in folder.iterdir():
            if not TEMPORARY.match(path.name):
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def load_training_state(directory: Path) -> Tuple[dict, dict, Dict[str, torch.Tensor]]:
    """Read a checkpoint's (trainer_state, optimiser state dict, tensors of state.safetensors); applies nothing."""
    directory = Path(directory)
    trainer_state = read_json(directory / TRAINER_STATE)
    meta = read_json(directory / "optimizer.json")
    optimizer_state = optimizer_from_safe(load_safetensors(directory / "optimizer.safetensors"), meta)
    return trainer_state, optimizer_state, load_safetensors(directory / "state.safetensors")


def check_global_batch(directory: Path, batch_size: int) -> None:
    """Memories and data position belong to the global batch rows: resuming checkpoint ``directory`` needs the
    same global batch size."""
    saved = read_json(directory / TRAINER_STATE).get("data", {}).get("batch_size")
    if saved != batch_size:
        raise ConfigError(f"batch_size: {directory} was trained with a global batch of {saved} rows, not {batch_size}; "
                          f"resume with --batch-size {saved} (any number of processes that divides it works)")


def copy_as_best(source: Path, run_dir: Path, names=None, info: Optional[dict] = None) -> Path:
    """Replace ``RUN_DIR/best`` by a copy of a checkpoint's model files (``names``: default all but the training
    state) and ``best.json`` (``info``), atomically: a temporary folder renamed into place."""
    names = names if names is not None else [p.name for p in Path(source).iterdir() if p.name not in TRAINING_ONLY]

    def fill(tmp: Path) -> None:
        for name in names:
            if (source / name).exists():
                shutil.copy2(source / name, tmp / name)
        if info is not None:
            write_json(tmp / BEST_INFO, info)
        _fsync_dir(tmp)

    return _replace_dir(Path(run_dir) / "best", fill)


def best_info(run_dir) -> Optional[dict]:
    """``best/best.json`` of a run, or None when best/ is missing or has no readable info."""
    path = Path(run_dir) / "best" / BEST_INFO
    if not path.is_file():
        return None
    try:
        return read_json(path)
    except CheckpointError:
        return None


def repair_best(run_dir, best_step: Optional[int], best_valid: Optional[float]) -> Optional[str]:
    """Make ``best/`` the checkpoint of ``best_step`` (the trainer state's); a message when it had to change.

    With no best step (no validation yet), a leftover ``best/`` is removed. When the checkpoint of
    ``best_step`` no longer exists (pruned) and best/ does not hold it, best/ is left alone and the message says so.
    """
    run_dir = Path(run_dir)
    best = run_dir / "best"
    info = best_info(run_dir)
    if best_step is None:
        if best.exists():
            shutil.rmtree(best)
            return "removed best/: no validation is recorded at the resumed step"
        return None
    if info is not None and info.get("step") == best_step and is_model_dir(best):
        return None
    source = checkpoints_dir(run_dir) / f"step_{best_step:08d}"
    if not (source / COMPLETE).is_file():
        return (f"best/ should hold step {best_step} (valid loss {best_valid:.4f}), whose checkpoint is gone; "
                f"best/ left as it is")
    copy_as_best(source, run_dir, info={"step": best_step, "valid_loss": best_valid})
    held = "nothing" if info is None else f"step {info.get('step')}"
    return f"repaired best/: it held {held}, the best validation loss {best_valid:.4f} is step {best_step}'s"


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


__all__ = ["BEST_INFO", "TEMPORARY", "TRAINER_STATE", "TRAINING_ONLY", "best_info", "check_global_batch",
           "checkpoint_step", "checkpoints_dir", "copy_as_best", "incomplete_checkpoints", "latest_checkpoint",
           "list_checkpoints", "load_training_state", "mems_from_tensors", "mems_to_tensors", "optimizer_from_safe",
           "optimizer_to_safe", "prune_checkpoints", "remove_half_pruned", "remove_temporaries", "repair_best",
           "rng_state", "save_checkpoint", "save_model_tensors", "save_tensors", "set_rng_state"]
