"""Distributed training on PyTorch's own stack: ``torchrun`` starts the processes, DDP or FSDP trains.

``torchrun`` (``python -m torch.distributed.run``) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR`` and ``MASTER_PORT`` in each worker; :func:`setup` reads them and joins the process group
(gloo on CPU, nccl on CUDA with device ``cuda:LOCAL_RANK``). Without them the run is a single process
and nothing here does any communication.

The global batch ``B`` (``train.batch_size``) is split over the ``W`` ranks: rank ``r`` owns global rows
``[r*B/W, (r+1)*B/W)`` of the batch streams (see :class:`~transformer_xl.data.LMOrderedIterator`) and keeps
the memories of those rows; each rank splits its rows again into ``batch_chunk`` chunks. The gradient of a
rank is ``sum_c grad(mean loss of chunk c) / batch_chunk``; DDP (and FSDP) average it over the ranks, so
the update equals that of one process with batch ``B`` and ``batch_chunk = W * batch_chunk``.

Checkpoints keep one layout whatever the world size: memories per global row, every rank's RNG state
(``rng.torch.rank{r}``), the rank-independent data position, and full (unsharded) model and optimiser
tensors. Starting the processes (``txl train --nproc N``) is :mod:`transformer_xl.training.launch`.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .. import devices
from ..errors import ConfigError, TXLError
from ..model.saving import unique_state_dict
from . import checkpoint_files as ckpt

log = logging.getLogger(__name__)

ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class PeerFailure(TXLError):
    """A collective failed: a peer process died, hung past ``dist_timeout``, or the network dropped."""

    exit_code = 1


@dataclass
class DistContext:
    """Where this process stands: its rank among ``world_size`` processes and the device it computes on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    parallel: str = "ddp"  # ddp | fsdp

    @property
    def active(self) -> bool:
        """True when there are peers to talk to."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, shows progress and writes checkpoints."""
        return self.rank == 0

    def rows(self, batch_size: int) -> slice:
        """This rank's global rows of a batch of ``batch_size``."""
        local = batch_size // self.world_size
        return slice(self.rank * local, (self.rank + 1) * local)

    def barrier(self) -> None:
        if not self.active:
            return
        import torch.distributed as dist

        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()


# ---------------------------------------------------------------------------- joining and leaving
def torchrun_env() -> Optional[Tuple[int, int, int]]:
    """``(rank, world_size, local_rank)`` set by torchrun, or None outside it."""
    if not all(k in os.environ for k in ENV_KEYS[:2]):
        return None
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))
    except ValueError:
        raise ConfigError(f"torchrun environment is malformed: RANK={os.environ.get('RANK')!r} "
                          f"WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}") from None


def check_batch_split(batch_size: int, batch_chunk: int, world_size: int) -> None:
    """The global batch must split evenly over the ranks, then over each rank's chunks."""
    if batch_size % (world_size * batch_chunk):
        raise ConfigError(f"batch_size: the global batch of {batch_size} rows does not split over {world_size} "
                          f"process(es) x batch_chunk {batch_chunk}; use a multiple of {world_size * batch_chunk}")


def setup(t, device: torch.device) -> DistContext:
    """Join torchrun's process group if there is one (idempotent); a single-process context otherwise."""
    import torch.distributed as dist

    env = torchrun_env()
    if env is None or env[1] == 1:
        if t.parallel == "fsdp":
            log.info("parallel: fsdp with a single process trains unsharded")
        return DistContext(device=device, parallel=t.parallel)
    rank, world, local = env
    check_batch_split(t.batch_size, t.batch_chunk, world)
    if device.type == "cuda":
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                timeout=datetime.timedelta(seconds=t.dist_timeout))
    if rank != 0:  # one voice: only rank 0 reports progress
        logging.getLogger("transformer_xl").setLevel(logging.WARNING)
    return DistContext(rank, world, local, device, t.parallel)


def teardown() -> None:
    """Leave the process group at the end of a run that every rank finished.

    Gloo's worker threads release finished work (and the tensors it holds, which needs the GIL) after the work
    completes. If the process group's last reference (held by DDP's reducer) goes while a worker is still doing
    that, the destructor joins the worker while holding the GIL: a deadlock at exit. A final barrier, then a pause
    that releases the GIL, leaves every worker idle first.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        except RuntimeError:  # a peer already left: nothing is pending with it
            pass
        time.sleep(0.2)
        dist.destroy_process_group()


@contextlib.contextmanager
def peer_failures():
    """Turn a failed collective into one line (exit status 1) instead of a backend traceback."""
    try:
        yield
    except RuntimeError as exc:
        if not _is_peer_failure(exc):
            raise
        message = " ".join(str(exc).split())
        raise PeerFailure(f"rank {os.environ.get('RANK', '?')}: lost the other processes ({message[:240]}); "
                          f"the last checkpoint is intact: rerun the same command with --resume added") from None


def _is_peer_failure(exc: RuntimeError) -> bool:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    return isinstance(exc, dist.DistError) or "gloo" in str(exc) or "NCCL" in str(exc)


def in_turn(ctx: DistContext, fn: Callable):
    """``fn()`` on each machine's local rank 0 first (it may fill a cache), then on the other ranks."""
    if not ctx.active:
        return fn()
    if ctx.local_rank != 0:
        ctx.barrier()
    try:
        return fn()
    finally:
        if ctx.local_rank == 0:
            ctx.barrier()


def seed_dropout(ctx: DistContext, seed: int) -> None:
    """Ranks other than 0 draw dropout from their own stream (rank 0 keeps the single-process one)."""
    if ctx.rank > 0:
        torch.manual_seed(seed + ctx.rank)


# ---------------------------------------------------------------------------- parallel modes
class SingleProcess:
    """How one training step is distributed; this base is one process (also ``parallel: fsdp`` with a single
    process, which trains unsharded). :func:`parallel_mode` picks the object for a context."""

    def __init__(self, ctx: DistContext):
        self.ctx = ctx

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module the training step calls."""
        return model

    def chunk_sync(self, engine: torch.nn.Module, last: bool):
        """Context for one chunk's forward/backward (gradients are reduced across ranks on the last chunk only)."""
        return contextlib.nullcontext()

    def drop_unused_grads(self, model: torch.nn.Module) -> None:
        """After backward: drop gradients of parameters that took no part in the step (FSDP only)."""

    def grad_scaler(self, enabled: bool):
        """fp16's loss scaler."""
        return torch.amp.GradScaler("cuda", enabled=enabled)

    def full_model_tensors(self, model: torch.nn.Module) -> Optional[Dict[str, torch.Tensor]]:
        """The full weights to save when the module cannot save itself (FSDP shards), else None."""
        return None

    def full_optimizer_state(self, model: torch.nn.Module, optimizer) -> Optional[dict]:
        """The optimiser's full, index-keyed ``state_dict()`` on rank 0 (None elsewhere)."""
        return optimizer.state_dict() if self.ctx.is_main else None

    def load_optimizer_state(self, model: torch.nn.Module, optimizer, state: dict) -> None:
        """Load a full, index-keyed optimiser state dict (every rank passes the same one)."""
        optimizer.load_state_dict(state)


class DataParallel(SingleProcess):
    """DDP: every rank holds the whole model; gradients are averaged after the last chunk's backward."""

    def wrap(self, model):
        from torch.nn.parallel import DistributedDataParallel

        # the adaptive softmax/input skip clusters without tokens in a batch: those parameters get no gradient
        unused = bool(model.config.cutoffs)
        return DistributedDataParallel(model, device_ids=[self.ctx.device.index] if self.ctx.device.type == "cuda"
                                       else None, find_unused_parameters=unused)

    def chunk_sync(self, engine, last):
        return contextlib.nullcontext() if last else engine.no_sync()


class FullyShardedDataParallel(SingleProcess):
    """FSDP2: each layer is one all-gather unit; embeddings, softmax and biases form the root unit. Checkpoints
    hold full (unsharded) tensors."""

    def wrap(self, model):
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            try:
                from torch.distributed._composable.fsdp import fully_shard
            except ImportError:
                raise ConfigError(f"parallel: fsdp needs torch.distributed.fsdp.fully_shard (torch >= 2.4); "
                                  f"this is torch {torch.__version__}") from None
        # the memories in the output are detached slices (views); nothing updates them in place
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
        if model.config.cutoffs:  # FSDP reduces the same set of gradients on every rank: no cluster may be skipped
            for module in (model.word_emb, model.crit):
                module.register_forward_hook(_touch_every_parameter)
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model

    def chunk_sync(self, engine, last):
        engine.set_requires_gradient_sync(last)
        return contextlib.nullcontext()

    def drop_unused_grads(self, model):
        """A parameter whose gradient is zero on every rank took no part in the step (the forward hook only kept
        the ranks in step); it gets no gradient, as in one process or DDP, so that Adam leaves it and its moments
        alone."""
        if not model.config.cutoffs:
            return
        import torch.distributed as dist

        params = [p for p in model.parameters() if p.grad is not None]
        if not params:
            return
        used = torch.stack([_local(p.grad).ne(0).any() for p in params]).to(self.ctx.device, torch.float64)
        dist.all_reduce(used)
        for p, count in zip(params, used.tolist()):
            if count == 0:
                p.grad = None

    def grad_scaler(self, enabled):
        """Every rank must agree on skipping a step with inf gradients."""
        if not enabled:
            return super().grad_scaler(enabled)
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler("cuda")

    def full_model_tensors(self, model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.ctx.is_main:
            return None
        return {name: full[name].contiguous() for name in unique_state_dict(model)}

    def full_optimizer_state(self, model, optimizer):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        full = get_optimizer_state_dict(model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if not self.ctx.is_main:
            return None
        index = {name: i for i, name in enumerate(_param_names(model))}
        groups = [{**g, "params": [index[n] for n in g["params"]]} for g in full["param_groups"]]
        return {"state": {index[n]: s for n, s in full["state"].items()}, "param_groups": groups}

    def load_optimizer_state(self, model, optimizer, state):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        names = _param_names(model)
        groups = [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]
        by_name = {"state": {names[i]: s for i, s in state["state"].items()}, "param_groups": groups}
        set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


def parallel_mode(ctx: DistContext) -> SingleProcess:
    """The object for this run: one process, DDP, or FSDP (``train.parallel``) over several."""
    if not ctx.active:
        return SingleProcess(ctx)
    return FullyShardedDataParallel(ctx) if ctx.parallel == "fsdp" else DataParallel(ctx)


def _touch_every_parameter(module: torch.nn.Module, inputs, output: torch.Tensor) -> torch.Tensor:
    """Forward hook: ``output + 0 * (one element of each parameter)``, so that adaptive input/softmax clusters
    without tokens in this rank's batch still get a (zero) gradient instead of none."""
    return output + sum(p.reshape(-1)[0] for p in module.parameters()) * 0.0


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor; a plain tensor as it is."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


# ---------------------------------------------------------------------------- collectives
def all_reduce_sum(ctx: DistContext, values: Sequence[float]) -> List[float]:
    """Element-wise sums over the ranks of the run (float64)."""
    return devices.all_reduce_sum(values, ctx.device) if ctx.active else list(values)


def check_agree(ctx: DistContext, value: int, what: str, hint: str) -> None:
    """Refuse to go on when the ranks hold different values of ``what`` (e.g. the step they resume from)."""
    if not ctx.active:
        return
    import torch.distributed as dist

    buf = torch.tensor([value, -value], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(buf, op=dist.ReduceOp.MAX)
    if buf[0] != -buf[1]:
        raise ConfigError(f"{what}: the processes disagree ({-buf[1]:.0f} to {buf[0]:.0f}); {hint}")


def gather_rows(ctx: DistContext, tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """Rank 0 gets every rank's ``tensor [b, ...]`` stacked in rank order ``[W*b, ...]`` (on CPU); others None."""
    if not ctx.active:
        return tensor.detach().cpu()
    import torch.distributed as dist

    local = tensor.detach().to(ctx.device).contiguous()
    parts = [torch.empty_like(local) for _ in range(ctx.world_size)] if ctx.is_main else None
    dist.gather(local, parts, dst=0)
    return torch.cat([p.cpu() for p in parts], dim=0) if ctx.is_main else None


def gather_memory(ctx: DistContext, chunk_mems) -> Optional[List[torch.Tensor]]:
    """Every rank's chunk memories as one memory per global row: ``n_layer x [B, M, d]`` on rank 0.

    Chunk ``c`` of rank ``r`` holds the rows that follow chunk ``c - 1`` (and rank ``r - 1``'s last chunk),
    so concatenating chunks, then ranks, restores the global row order. All chunks share one length M.
    """
    if chunk_mems[0] is None:
        return None
    n_layer = len(chunk_mems[0])
    layers = [gather_rows(ctx, torch.cat([m[i] for m in chunk_mems], dim=0)) for i in range(n_layer)]
    return layers if ctx.is_main else None


def gather_rng(ctx: DistContext) -> Dict[str, torch.Tensor]:
    """Each rank's torch (and CUDA) generator state, as ``rng.torch.rank{r}`` (``rng.cuda.rank{r}``), on rank 0."""
    if not ctx.active:
        return {}
    states = {"torch": torch.get_rng_state()}
    if ctx.device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(ctx.device)
    out = {}
    for kind, state in states.items():
        rows = gather_rows(ctx, state[None])
        if ctx.is_main:
            out.update({f"rng.{kind}.rank{r}": rows[r].clone() for r in range(ctx.world_size)})
    if ctx.is_main:
        out["rng.torch"] = out["rng.torch.rank0"].clone()  # what a single process resumes with
    return out


def restore_rng(ctx: DistContext, tensors: Dict[str, torch.Tensor], seed: int) -> None:
    """Set this rank's generators from a checkpoint; a rank the checkpoint has no state for is reseeded."""

    if not ctx.active:
        ckpt.set_rng_state(tensors)
        return
    state = tensors.get(f"rng.torch.rank{ctx.rank}", tensors.get("rng.torch") if ctx.rank == 0 else None)
    if state is None:
        log.warning("rank %d: the checkpoint was written by fewer processes and holds no RNG state for this rank; "
                    "dropout is reseeded", ctx.rank)
        seed_dropout(ctx, seed)
        return
    torch.set_rng_state(state)
    cuda = tensors.get(f"rng.cuda.rank{ctx.rank}")
    if cuda is not None and ctx.device.type == "cuda":
        torch.cuda.set_rng_state(cuda, ctx.device)


def _param_names(model: torch.nn.Module) -> List[str]:
    """Trainable parameter names in the optimiser's order (``build_optimizer`` takes ``model.parameters()``)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


# ---------------------------------------------------------------------------- the --nproc launcher
