"""Saving and restoring the stateful parts of a run, in the layout of :mod:`.checkpoint`.

A run's state is made of parts that each save and restore themselves, as torchtitan's ``CheckpointManager``
treats DCP ``Stateful`` objects: the model's weights, the optimiser, the trainer's own state (step, data
position, best validation, grad scaler: anything with ``state_dict()``/``load_state_dict()``), the memories of the
global batch rows and every rank's RNG. :class:`Checkpointer` gathers them from every rank (full tensors, also
from FSDP shards), lets rank 0 write one checkpoint (marker last, older ones pruned, best/ swapped atomically),
and puts them back on resume, whatever the world size that divides the global batch.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..errors import CheckpointError, ConfigError, DataError
from ..model import TransformerXL
from . import checkpoint as ckpt
from . import distributed, preflight
from .run_dir import RunDirectory

log = logging.getLogger(__name__)


class Checkpointer:
    """Checkpoints of one run (module docstring): ``run_dir`` holds them, ``dist``/``parallel`` are the run's
    process group and parallel mode, ``keep`` how many to keep."""

    def __init__(self, run_dir: RunDirectory, dist, parallel, keep: int):
        self.run_dir, self.dist, self.parallel, self.keep = run_dir, dist, parallel, keep

    # ------------------------------------------------------------------ saving
    def save(self, step: int, model: TransformerXL, optimizer, trainer_state: dict, chunk_mems: List, vocab,
             is_best: bool = False, best_valid: Optional[float] = None) -> Optional[Path]:
        """Every rank hands its part to rank 0, which writes checkpoint ``step`` (and best/ when ``is_best``);
        the others wait. Rank 0 gets the path."""
        weights = self.parallel.full_model_tensors(model)
        optimizer_state = self.parallel.full_optimizer_state(model, optimizer)
        mems = distributed.gather_memory(self.dist, chunk_mems)
        rng = distributed.gather_rng(self.dist) if self.dist.active else ckpt.rng_state()
        path = None
        if self.dist.is_main:
            root = self.run_dir.path
            with preflight.disk_writes(f"checkpoint step {step} in {ckpt.checkpoints_dir(root)}",
                                       self.run_dir.intact_hint):
                path = ckpt.save_checkpoint(root, step, _model_writer(model, weights), optimizer_state, trainer_state,
                                            {**rng, **ckpt.mems_to_tensors(mems)}, self._extra_writer(vocab),
                                            self.keep)
                if is_best:
                    ckpt.copy_as_best(path, root, info={"step": step, "valid_loss": best_valid})
        self.dist.barrier()
        return path

    def _extra_writer(self, vocab):
        def write(directory: Path) -> None:
            vocab.save(directory)
            shutil.copy2(self.run_dir.run_config, directory / self.run_dir.run_config.name)

        return write

    # ------------------------------------------------------------------ restoring
    def load_model(self, model: TransformerXL, directory: Path) -> None:
        """Weights first: DDP and FSDP take the module as it is when they wrap it."""
        saved = TransformerXL.from_pretrained(directory, map_location=next(model.parameters()).device)
        if saved.config != model.config:
            raise ConfigError(f"{directory}: the checkpoint's model config differs from this run's config; "
                              f"resume with the run's own run.yaml")
        model.load_state_dict(saved.state_dict())

    def load(self, directory: Path, model: TransformerXL, optimizer, vocab_size: int) -> Tuple[dict, Dict]:
        """Restore the optimiser; returns the trainer's state (``trainer_state.json``) and the tensors of
        ``state.safetensors`` (memories, RNG) for :meth:`memories` and :meth:`restore_rng`."""
        state, optimizer_state, tensors = ckpt.load_training_state(directory)
        if state.get("vocab_size") != vocab_size:
            raise DataError(f"{directory}: vocabulary of {state.get('vocab_size')} symbols does not match the "
                            f"corpus' {vocab_size}")
        try:
            self.parallel.load_optimizer_state(model, optimizer, optimizer_state)
        except (ValueError, KeyError, IndexError, RuntimeError) as exc:
            raise CheckpointError(f"{directory}: optimizer state does not match this model "
                                  f"({' '.join(str(exc).split())})") from None
        saved_world = state.get("world_size", 1)
        log.info("resumed %s at step %d%s", directory, state["step"], f" (written by {saved_world} processes, now "
                 f"{self.dist.world_size})" if saved_world != self.dist.world_size else "")
        return state, tensors

    def memories(self, tensors: Dict[str, torch.Tensor], batch_size: int, batch_chunk: int) -> List:
        """This rank's memories, one per chunk of its rows of the global batch."""
        return ckpt.mems_from_tensors(tensors, batch_size, self.dist.rows(batch_size), batch_chunk, self.dist.device)

    def restore_rng(self, tensors: Dict[str, torch.Tensor], seed: int) -> None:
        distributed.restore_rng(self.dist, tensors, seed)


def _model_writer(model: TransformerXL, weights):
    """Writes the model files: from the module, or from full tensors gathered apart from it (FSDP)."""
    if weights is None:
        return model.save_pretrained
    return lambda directory: ckpt.save_model_tensors(directory, model.config, weights)


__all__ = ["Checkpointer"]
