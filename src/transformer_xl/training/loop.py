"""The training loop: ordered batches with memory, periodic evaluation, exact resume.

Typical use::

    from transformer_xl.training import load_run_config, train
    result = train(load_run_config("default", ["--max-steps", "200"]))
    print(result.best_valid_loss)

Under ``torchrun`` the same code trains with DistributedDataParallel (or FSDP, ``train.parallel: fsdp``):
each rank owns its share of the batch rows and their memories, rank 0 logs and writes checkpoints
(see :mod:`transformer_xl.training.distributed`).
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import torch
import yaml

from ..errors import CheckpointError, ConfigError, DataError
from ..model import TransformerXL
from ..model.transformer import IGNORE_INDEX
from . import checkpoint as ckpt
from . import distributed
from .allocator import keep_cpu_memory
from .config import RunConfig
from .metrics import MetricsLogger, NullMetrics, metric_name, metric_value
from .schedule import build_optimizer, lr_at, set_lr

log = logging.getLogger(__name__)

RUN_CONFIG_NAME = "run.yaml"


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    best_valid_loss: Optional[float]
    last_valid_loss: Optional[float]
    metric: str
    train_losses: List[float] = field(default_factory=list)  # one per optimiser step of this process (mean over ranks)
    stopped_by: str = "max_steps"  # max_steps | max_time
    rank: int = 0  # of this process in a distributed run


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: {name} requested but CUDA is not available")
    return device


def autocast_dtype(precision: str, device: torch.device):
    if precision == "fp32":
        return None
    if precision == "fp16" and device.type != "cuda":
        raise ConfigError("precision: fp16 needs a CUDA device (use bf16 on CPU)")
    if precision == "bf16" and device.type == "cpu" and not _cpu_has_bf16():
        log.warning("precision bf16: this CPU has no native bf16 instructions (avx512_bf16/amx); "
                    "expect bf16 to be slower than fp32")
    return torch.bfloat16 if precision == "bf16" else torch.float16


def _cpu_has_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def load_data(cfg: RunConfig):
    """The corpus named by the data section (see :mod:`transformer_xl.data`)."""
    from ..data import load_corpus, load_text_corpus

    d = cfg.data
    if d.dataset == "text":
        if not d.train_file:
            raise DataError("dataset 'text' needs --train-file PATH (and optionally --valid-file, --test-file)")
        return load_text_corpus(d.train_file, d.valid_file, d.test_file, level=d.level,
                                bpe_vocab_size=d.bpe_vocab_size, cache_dir=d.cache_dir)
    return load_corpus(d.dataset, data_dir=d.data_dir, cache_dir=d.cache_dir)


class Trainer:
    """Holds the model, optimiser, data and memories of one run (of this rank's rows, under torchrun)."""

    def __init__(self, cfg: RunConfig, resume: bool = False, corpus=None):
        self.cfg = cfg
        t = cfg.train
        self.run_dir = Path(t.run_dir)
        self.dist = distributed.setup(t, resolve_device(t.device))
        self.device = self.dist.device
        self.amp_dtype = autocast_dtype(t.precision, self.device)
        if t.num_threads:
            torch.set_num_threads(t.num_threads)
        if t.keep_cpu_memory and self.device.type == "cpu":
            keep_cpu_memory()
        latest = self._check_run_dir(resume)
        distributed.check_agree(self.dist, ckpt.checkpoint_step(latest), "checkpoint step to resume from",
                                "every machine must see --run-dir on one shared filesystem")
        torch.manual_seed(t.seed)
        self.corpus = corpus if corpus is not None else distributed.in_turn(self.dist, lambda: load_data(cfg))
        self.metric = metric_name(self.corpus.level)
        self.model = TransformerXL(cfg.model_config(n_token=len(self.corpus.vocab))).to(self.device)
        distributed.seed_dropout(self.dist, t.seed)
        if latest is not None:
            self._restore_model(latest)
        self.model.attn_chunk, self.model.fused_attention = t.attn_chunk, t.fused_attention
        self.engine = distributed.wrap(self.model, self.dist)
        if t.compile:  # compiles model.__call__ in place: the training step, evaluation and DDP all use it
            self.model.compile()  # what the training step calls
        self.optimizer = build_optimizer(self.model, t)
        self.scaler = distributed.grad_scaler(self.dist, t.precision == "fp16")
        self.step, self.best_valid, self.last_valid = 0, None, None
        self.chunk_mems: List = [None] * t.batch_chunk
        self.iterator = self._new_iterator()
        self.elapsed_before = 0.0
        if latest is not None:
            self._restore_state(latest)
        elif resume:
            log.info("no checkpoint in %s yet: starting from scratch", self.run_dir)
        self.metrics = (MetricsLogger(self.run_dir, t.tensorboard, truncate_after_step=self.step if latest else None)
                        if self.dist.is_main else NullMetrics())

    # ------------------------------------------------------------------ setup
    def _check_run_dir(self, resume: bool) -> Optional[Path]:
        """Refuse to overwrite a run, or to resume it with another global batch; returns the checkpoint to resume."""
        if not resume and ckpt.list_checkpoints(self.run_dir):
            raise ConfigError(f"run_dir: {self.run_dir} already holds checkpoints; pass --resume to continue it, "
                              f"or choose another --run-dir")
        latest = ckpt.latest_checkpoint(self.run_dir) if resume else None
        if latest is not None:  # refuse before anything is written
            ckpt.check_global_batch(latest, ckpt.read_json(latest / ckpt.TRAINER_STATE), self.cfg.train.batch_size)
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / RUN_CONFIG_NAME, "w", encoding="utf-8") as fh:
                yaml.safe_dump(self.cfg.to_dict(), fh, sort_keys=False)
        return latest

    def _new_iterator(self):
        from ..data import LMOrderedIterator

        t, m = self.cfg.train, self.model.config
        return LMOrderedIterator(self.corpus.train, t.batch_size, m.tgt_len, ext_len=m.ext_len, device=self.device,
                                 varlen=t.varlen, seed=t.seed, rank=self.dist.rank, world_size=self.dist.world_size)

    @property
    def epoch(self) -> int:
        return self.iterator.epoch

    def _restore_model(self, directory: Path) -> None:
        """Weights first: DDP and FSDP take the module as it is when they wrap it."""
        saved = TransformerXL.from_pretrained(directory, map_location=self.device)
        if saved.config != self.model.config:
            raise ConfigError(f"{directory}: the checkpoint's model config differs from this run's config; "
                              f"resume with the run's own run.yaml")
        self.model.load_state_dict(saved.state_dict())

    def _restore_state(self, directory: Path) -> None:
        t = self.cfg.train
        state, optimizer_state, tensors = ckpt.load_training_state(directory)
        if state.get("vocab_size") != len(self.corpus.vocab):
            raise DataError(f"{directory}: vocabulary of {state.get('vocab_size')} symbols does not match the "
                            f"corpus' {len(self.corpus.vocab)}")
        try:
            distributed.load_optimizer_state(self.dist, self.model, self.optimizer, optimizer_state)
        except (ValueError, KeyError, IndexError, RuntimeError) as exc:
            raise CheckpointError(f"{directory}: optimizer state does not match this model "
                                  f"({' '.join(str(exc).split())})") from None
        self.step = state["step"]
        self.best_valid, self.last_valid = state.get("best_valid"), state.get("last_valid")
        self.elapsed_before = state.get("elapsed", 0.0)
        self.iterator.load_state_dict(state["data"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.chunk_mems = ckpt.mems_from_tensors(tensors, t.batch_size, self.dist.rows(t.batch_size), t.batch_chunk,
                                                 self.device)
        distributed.restore_rng(self.dist, tensors, t.seed)
        saved_world = state.get("world_size", 1)
        log.info("resumed %s at step %d%s", directory, self.step, f" (written by {saved_world} processes, now "
                 f"{self.dist.world_size})" if saved_world != self.dist.world_size else "")

    # ------------------------------------------------------------------ one step
    def _batches(self):
        """Training batches forever; each epoch starts the streams again and forgets the memory."""
        while True:
            if self.iterator.position == 0:
                self.chunk_mems = [None] * self.cfg.train.batch_chunk
            for inp, tgt, _ in self.iterator:
                yield inp, align_labels(inp, tgt)

    def train_step(self, inp: torch.Tensor, tgt: torch.Tensor) -> float:
        """One optimiser step over ``batch_chunk`` chunks of this rank's rows; returns this rank's mean loss.

        Each chunk's loss is its mean over tokens divided by ``batch_chunk``; DDP/FSDP average the gradients
        over ranks, so the step is that of one process holding all rows with ``W * batch_chunk`` chunks.
        Gradients are reduced across ranks during the last chunk's backward only.
        """
        t = self.cfg.train
        self.engine.train()
        set_lr(self.optimizer, lr_at(self.step, t))
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for c, (inp_c, tgt_c) in enumerate(zip(inp.chunk(t.batch_chunk), tgt.chunk(t.batch_chunk))):
            with distributed.chunk_sync(self.engine, self.dist, last=c == t.batch_chunk - 1):
                with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
                    out = self.engine(inp_c, tgt_c, mems=self.chunk_mems[c])
                loss = out.loss.float() / t.batch_chunk
                self.scaler.scale(loss).backward()
            self.chunk_mems[c] = out.mems
            total += float(loss.detach())
        distributed.drop_unused_grads(self.dist, self.model)
        if t.clip > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step += 1
        return total

    # ------------------------------------------------------------------ evaluation and saving
    def evaluate(self, split: str = "valid", max_steps: Optional[int] = None):
        from ..evaluation import evaluate

        e = self.cfg.eval
        data = getattr(self.corpus, split)
        # the ranks split the evaluation rows when they divide evenly; otherwise each reads them all
        split_rows = e.batch_size % self.dist.world_size == 0
        return evaluate(self.model, data, batch_size=e.batch_size, tgt_len=e.tgt_len, mem_len=e.mem_len,
                        ext_len=e.ext_len, clamp_len=e.clamp_len, same_length=e.same_length, level=self.corpus.level,
                        max_steps=max_steps if max_steps is not None else e.max_steps, device=self.device,
                        autocast_dtype=self.amp_dtype, rank=self.dist.rank if split_rows else 0,
                        world_size=self.dist.world_size if split_rows else 1)

    def _trainer_state(self, elapsed: float) -> dict:
        return {"step": self.step, "epoch": self.epoch, "data": self.iterator.state_dict(),
                "best_valid": self.best_valid, "last_valid": self.last_valid, "elapsed": elapsed,
                "vocab_size": len(self.corpus.vocab), "metric": self.metric,
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "world_size": self.dist.world_size, "parallel": self.dist.parallel if self.dist.active else None}

    def _write_extra(self, directory: Path) -> None:
        self.corpus.vocab.save(directory)
        shutil.copy2(self.run_dir / RUN_CONFIG_NAME, directory / RUN_CONFIG_NAME)

    def save(self, elapsed: float, is_best: bool = False) -> Optional[Path]:
        """Every rank hands its part to rank 0, which writes the checkpoint; the others wait. Rank 0 gets the path."""
        weights = distributed.full_model_tensors(self.dist, self.model)
        optimizer_state = distributed.full_optimizer_state(self.dist, self.model, self.optimizer)
        mems = distributed.gather_memory(self.dist, self.chunk_mems)
        rng = distributed.gather_rng(self.dist) if self.dist.active else ckpt.rng_state()
        path = None
        if self.dist.is_main:
            path = ckpt.save_checkpoint(self.run_dir, self.step, self._model_writer(weights), optimizer_state,
                                        self._trainer_state(elapsed), {**rng, **ckpt.mems_to_tensors(mems)},
                                        self._write_extra, self.cfg.train.keep_checkpoints)
            if is_best:
                names = [p.name for p in path.iterdir() if p.name not in
                         ("optimizer.safetensors", "optimizer.json", "state.safetensors", ckpt.TRAINER_STATE)]
                ckpt.copy_as_best(path, self.run_dir, names)
        self.dist.barrier()
        return path

    def _model_writer(self, weights):
        if weights is None:
            return self.model.save_pretrained
        return lambda directory: ckpt.save_model_tensors(directory, self.model.config, weights)

    # ------------------------------------------------------------------ the loop
    def run(self) -> TrainResult:
        t = self.cfg.train
        save_every = t.save_interval or t.eval_interval
        start = time.perf_counter()
        losses: List[float] = []
        window_loss, window_steps, window_tokens, window_start = 0.0, 0, 0, time.perf_counter()
        stopped_by = "max_steps"
        bar = _progress(t, self.step) if self.dist.is_main else None
        batches = self._batches()
        try:
            while self.step < t.max_steps:
                inp, tgt = next(batches)
                loss = self.train_step(inp, tgt)
                # the ranks agree on the mean loss and on stopping, so they all leave the loop together
                out_of_time = t.max_time is not None and time.perf_counter() - start >= t.max_time
                loss, out_of_time = distributed.agree_on_step(self.dist, loss, out_of_time)
                if not math.isfinite(loss):
                    raise ConfigError(f"training diverged at step {self.step} (loss {loss}); lower --lr or raise --warmup-steps")
                losses.append(loss)
                window_loss, window_steps = window_loss + loss, window_steps + 1
                window_tokens += int((tgt != IGNORE_INDEX).sum()) * self.dist.world_size
                elapsed = self.elapsed_before + time.perf_counter() - start
                if self.step % t.log_interval == 0 or self.step == t.max_steps:
                    now = time.perf_counter()
                    self._log_train(bar, window_loss / window_steps, window_tokens / max(now - window_start, 1e-9), elapsed)
                    window_loss, window_steps, window_tokens, window_start = 0.0, 0, 0, now
                done = self.step == t.max_steps or out_of_time
                is_best = False
                if self.step % t.eval_interval == 0 or done:
                    is_best = self._validate(bar)
                if self.step % save_every == 0 or done:
                    self.save(elapsed, is_best)
                if bar is not None:
                    bar.update(1)
                if out_of_time:
                    stopped_by = "max_time"
                    break
        finally:
            if bar is not None:
                bar.close()
            self.metrics.close()
        return TrainResult(self.run_dir, self.step, self.best_valid, self.last_valid, self.metric, losses, stopped_by,
                           self.dist.rank)

    def _log_train(self, bar, loss: float, tokens_per_s: float, elapsed: float) -> None:
        record = {"step": self.step, "split": "train", "epoch": self.epoch, "loss": loss,
                  self.metric: metric_value(loss, self.metric), "lr": lr_at(self.step - 1, self.cfg.train),
                  "tokens_per_s": tokens_per_s, "elapsed": elapsed}
        self.metrics.log(record)
        if bar is not None:
            bar.set_postfix({"loss": f"{loss:.3f}", self.metric: f"{record[self.metric]:.3f}", "lr": f"{record['lr']:.2e}",
                             "tok/s": f"{tokens_per_s:,.0f}"}, refresh=False)
        else:
            log.info("step %d | loss %.4f | %s %.3f | lr %.3g | %.0f tok/s", self.step, loss, self.metric,
                     record[self.metric], record["lr"], tokens_per_s)

    def _validate(self, bar) -> bool:
        result = self.evaluate("valid")
        self.last_valid = result.loss
        is_best = self.best_valid is None or result.loss < self.best_valid
        if is_best:
            self.best_valid = result.loss
        self.metrics.log({"step": self.step, "split": "valid", "loss": result.loss, self.metric: result.value,
                          "tokens_per_s": result.tokens_per_s})
        message = f"step {self.step} | valid loss {result.loss:.4f} | {self.metric} {result.value:.3f}" + (" | best" if is_best else "")
        if bar is not None:
            bar.write(message)
        else:
            log.info(message)
        return is_best


def align_labels(inp: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Labels ``[B, L]`` for inputs ``[B, ext + L]``: the ``ext`` leading context positions get -100."""
    ext = inp.size(1) - tgt.size(1)
    if ext == 0:
        return tgt
    return torch.cat([tgt.new_full((tgt.size(0), ext), IGNORE_INDEX), tgt], dim=1)


def _progress(t, initial: int):
    if not t.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=t.max_steps, initial=initial, unit="step", dynamic_ncols=True, smoothing=0.1)


def train(cfg: RunConfig, resume: bool = False, corpus=None) -> TrainResult:
    """Train (or resume) a run as configured; returns a summary. Under torchrun, every rank calls this."""
    with distributed.peer_failures():
        result = Trainer(cfg, resume=resume, corpus=corpus).run()
    distributed.teardown()  # after an error the process exits instead: peers may be gone
    return result

