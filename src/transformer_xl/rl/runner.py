"""``txl rl``: train a PPO agent with a memory on a Gymnasium environment, as a run like ``txl train``.

A run directory holds ``run.yaml`` (the settings), ``metrics.jsonl`` (one record per iteration; TensorBoard
events under ``tb/`` when tensorboard is installed), ``checkpoints/step_N/`` (the agent, the optimiser, the
RNG and the counters, written atomically, marker last), and at the end ``agent/`` (:meth:`MemoryAgent.save_pretrained`)
and ``returns.png`` (mean return against steps, with matplotlib). ``--resume`` goes on from the last checkpoint;
the environments start new episodes then (their inner state is not saved). Ctrl-C (or SIGTERM) finishes the
iteration, writes a checkpoint and stops; the same signal again stops at once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import torch
import yaml
from tqdm import tqdm

from ..analysis.figures import pyplot, save_figure
from ..errors import ConfigError, TXLError
from ..files import atomic_write_text
from ..training import checkpoint_files as ckpt
from ..training.lock import RunLock
from ..training.metrics_log import MetricsLogger
from ..training.signals import stop_requests
from . import ppo
from .agent import AgentConfig, MemoryAgent
from .envs import ObservationEncoder, check_action_space, make_envs

log = logging.getLogger(__name__)

SETTINGS_NAME = "run.yaml"
RETURN_WINDOW = 100  # mean_return: the mean of the last 100 finished episodes


@dataclasses.dataclass
class RLSettings:
    """Everything ``txl rl`` takes (its flags), typed. ``agent``: fields of :class:`AgentConfig` other than the
    environment's sizes; ``ppo``: :class:`~.ppo.PPOConfig`."""

    env_id: str
    steps: int = 300_000
    seed: int = 1
    run_dir: str = "runs/rl"
    resume: bool = False
    threads: int = 1  # torch CPU threads: one is fastest for a small model stepped one observation at a time
    save_every: int = 20  # iterations between checkpoints (and one at the end)
    keep_checkpoints: int = 2
    progress: bool = True
    tensorboard: bool = True
    agent: dict = dataclasses.field(default_factory=dict)
    ppo: ppo.PPOConfig = dataclasses.field(default_factory=ppo.PPOConfig)

    def check(self) -> None:
        for name, low in (("steps", 1), ("threads", 1), ("save_every", 1), ("keep_checkpoints", 1)):
            if getattr(self, name) < low:
                raise ConfigError(f"{name}: must be >= {low}, got {getattr(self, name)}")
        unknown = sorted(set(self.agent) - {f.name for f in dataclasses.fields(AgentConfig)})
        if unknown:
            raise ConfigError(f"agent: unknown field(s) {', '.join(unknown)}")

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("resume")
        return out


@dataclasses.dataclass
class RLResult:
    """What a run reports (``txl rl --json`` prints it)."""

    env: str
    steps: int
    seconds: float
    mean_return: Optional[float]
    episodes: int
    run_dir: str
    stopped_by: str = "steps"  # steps | SIGINT | SIGTERM

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def train_agent(settings: RLSettings) -> RLResult:
    """Train (or resume) the run ``settings.run_dir`` (module docstring)."""
    settings.check()
    torch.set_num_threads(settings.threads)
    envs, first_obs = make_envs(settings.env_id, settings.ppo.envs, settings.seed)  # bad ids fail before any write
    try:
        encoder = ObservationEncoder(envs.single_observation_space, settings.env_id)
        config = AgentConfig(obs_dim=encoder.dim, n_actions=check_action_space(envs.single_action_space,
                                                                               settings.env_id),
                             env_id=settings.env_id, **settings.agent)
        settings.ppo.check(config.window)
        with Run(settings) as run:
            return run.train(envs, encoder, first_obs, config)
    finally:
        envs.close()


class Run:
    """The run directory and the training loop of one ``txl rl`` run."""

    def __init__(self, settings: RLSettings):
        self.settings = settings
        self.path = Path(settings.run_dir)
        self.lock: Optional[RunLock] = None

    def __enter__(self) -> "Run":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"run_dir: cannot create {self.path} ({exc.strerror or exc})") from None
        self.lock = RunLock(self.path).acquire()
        for path in ckpt.remove_temporaries(self.path):
            log.info("removed %s, left by an interrupted run", path)
        return self

    def __exit__(self, *exc) -> None:
        if self.lock is not None:
            self.lock.release()

    # ------------------------------------------------------------------ the loop
    def train(self, envs, encoder, first_obs, config: AgentConfig) -> RLResult:
        s, cfg = self.settings, self.settings.ppo
        latest = self._checkpoint_to_resume(config)
        torch.manual_seed(s.seed)
        agent = MemoryAgent(config)
        optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
        state = {"step": 0, "iteration": 0, "seconds": 0.0, "returns": []}
        if latest is not None:
            state = self._restore(latest, agent, optimizer)
        atomic_write_text(self.path / SETTINGS_NAME, yaml.safe_dump(s.to_dict(), sort_keys=False))
        collector = ppo.Collector(envs, encoder, agent, first_obs)
        collector.finished = list(state["returns"])
        gen = torch.Generator().manual_seed(s.seed + state["iteration"])
        metrics = MetricsLogger(self.path, s.tensorboard, truncate_after_step=state["step"])
        per_iteration = cfg.envs * cfg.rollout
        total_iterations = math.ceil(s.steps / per_iteration)
        bar = _progress(s, state["step"])
        stopped_by, start = "steps", time.perf_counter() - state["seconds"]
        try:
            with stop_requests() as stop:
                while state["step"] < s.steps and not stop.requested:
                    if cfg.anneal_lr:
                        for group in optimizer.param_groups:
                            group["lr"] = cfg.lr * (1.0 - state["iteration"] / total_iterations)
                    batch = collector.collect(cfg.rollout, config.window)
                    ppo.advantages(batch, cfg.gamma, cfg.gae_lambda)
                    stats = ppo.update(agent, optimizer, batch, cfg, config.window, gen)
                    state["step"] += per_iteration
                    state["iteration"] += 1
                    state["seconds"] = time.perf_counter() - start
                    record = self._record(state, collector.finished, stats)
                    metrics.log(record)
                    _advance(bar, per_iteration, record)
                    if state["iteration"] % s.save_every == 0 or state["step"] >= s.steps:
                        self._save(agent, optimizer, state, collector.finished)
                if stop.requested:
                    stopped_by = stop.name
                    self._save(agent, optimizer, state, collector.finished)
        finally:
            metrics.close()
            if bar is not None:
                bar.close()
        agent.save_pretrained(self.path / "agent")
        self._plot()
        recent = collector.finished[-RETURN_WINDOW:]
        return RLResult(env=s.env_id, steps=state["step"], seconds=round(state["seconds"], 2),
                        mean_return=float(np.mean(recent)) if recent else None, episodes=len(collector.finished),
                        run_dir=str(self.path), stopped_by=stopped_by)

    @staticmethod
    def _record(state: dict, finished: List[float], stats: dict) -> dict:
        recent = finished[-RETURN_WINDOW:]
        return {"step": state["step"], "iteration": state["iteration"], "seconds": round(state["seconds"], 3),
                "mean_return": float(np.mean(recent)) if recent else None, "episodes": len(finished),
                "steps_per_second": round(state["step"] / max(state["seconds"], 1e-9), 1),
                **{k: round(v, 6) for k, v in stats.items()}}

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_to_resume(self, config: AgentConfig) -> Optional[Path]:
        latest = ckpt.latest_checkpoint(self.path)
        if latest is None:
            return None
        if not self.settings.resume:
            raise ConfigError(f"run_dir: {self.path} already holds checkpoints; pass --resume to continue it, or "
                              f"choose another --run-dir")
        saved = MemoryAgent.from_pretrained(latest).config
        if saved != config:
            changed = [f.name for f in dataclasses.fields(config) if getattr(saved, f.name) != getattr(config, f.name)]
            raise ConfigError(f"{latest}: the run's agent differs in {', '.join(changed)}; resume with the run's own "
                              f"settings (see {self.path / SETTINGS_NAME})")
        return latest

    def _save(self, agent: MemoryAgent, optimizer, state: dict, finished: List[float]) -> Path:
        trainer_state = {**state, "returns": finished[-RETURN_WINDOW:], "env_id": self.settings.env_id}
        return ckpt.save_checkpoint(self.path, state["step"], agent.save_pretrained, optimizer.state_dict(),
                                    trainer_state, ckpt.rng_state(), self._write_settings,
                                    self.settings.keep_checkpoints)

    def _write_settings(self, directory: Path) -> None:
        atomic_write_text(directory / SETTINGS_NAME, yaml.safe_dump(self.settings.to_dict(), sort_keys=False))

    def _restore(self, directory: Path, agent: MemoryAgent, optimizer) -> dict:
        trainer_state, optimizer_state, tensors = ckpt.load_training_state(directory)
        agent.load_state_dict(MemoryAgent.from_pretrained(directory).state_dict())
        optimizer.load_state_dict(optimizer_state)
        ckpt.set_rng_state(tensors)
        log.info("resumed %s at step %d", directory, trainer_state["step"])
        return {k: trainer_state[k] for k in ("step", "iteration", "seconds", "returns")}

    def _plot(self) -> None:
        """``returns.png``: mean return of the last 100 episodes against steps (skipped without matplotlib)."""
        try:
            plt = pyplot()
        except TXLError as exc:
            log.info("%s; no returns.png", exc)
            return
        records = [r for r in _read_records(self.path / "metrics.jsonl") if r.get("mean_return") is not None]
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot([r["step"] for r in records], [r["mean_return"] for r in records])
        ax.set_xlabel("environment steps")
        ax.set_ylabel(f"mean return (last {RETURN_WINDOW} episodes)")
        ax.set_title(self.settings.env_id)
        ax.grid(alpha=0.3)
        save_figure(fig, self.path / "returns.png")


def _read_records(path: Path) -> List[dict]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue  # a torn last line of a killed run
    return records


def _progress(settings: RLSettings, initial: int):
    if not settings.progress:
        return None
    return tqdm(total=settings.steps, initial=initial, unit="step", file=sys.stderr, dynamic_ncols=True,
                desc=settings.env_id)


def _advance(bar, n: int, record: dict) -> None:
    if bar is None:
        return
    bar.update(n)
    if record["mean_return"] is not None:
        bar.set_postfix(mean_return=f"{record['mean_return']:.3f}", refresh=False)
