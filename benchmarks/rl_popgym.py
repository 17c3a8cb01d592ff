"""The POPGym memory suite, side by side: ``txl rl``'s agents and peers on the same tasks, seeds and steps.

Agents:

* ``gtrxl``: ``txl rl TASK`` with no flags (GTrXL, ``--mem-len 64``, the family preset where there is one);
* ``trxl``: the same without gates (``--gating none``);
* ``gru``: ``--core gru``, a GRU of the same width;
* ``none``: ``--mem-len 0``, no memory (the current observation only);
* ``no-prev``: ``--no-prev-action``, GTrXL without the previous action among its inputs (what it was before);
* ``prev-only``: ``--mem-len 0 --prev-action``, no memory but the previous action (a memory of one step);
* ``recurrentppo``: sb3-contrib's ``RecurrentPPO("MlpLstmPolicy", env)`` with its defaults on 16 environments (needs
  ``pip install sb3-contrib``; POPGym's Tuple observations are not SB3's);
* ``cleanrl``: CleanRL's ``ppo_trxl.py``, unmodified, run from a checkout given with ``--cleanrl DIR`` in the
  python given with ``--cleanrl-python`` (its own environment: tyro, einops, memory-gym, minigrid), with the
  settings its documentation gives for vector observations.

Each run is one process with one torch thread, ``--parallel`` at a time, every agent on the same environment steps
(``--steps``, 1M by default; 0: what ``txl rl`` would run, its preset's steps where one sets them). Every finished
run is a line of ``--out`` (JSON, with the CPU it ran on), so a long suite can be stopped and started again, or
split between machines; the tables are printed from that file: per task, each agent's mean return of the last 100
episodes (mean ± standard error over the seeds) and whether GTrXL is above, level with or below the memoryless agent
and the GRU; then per agent the steps at which a run first reached 90% of the best final return any agent reached
on the task (median over the runs that did, and how many), the largest fall after 0.9, the wall time of a run and
the environment steps per second while learning, with the CPU named::

    python benchmarks/rl_popgym.py --seeds 3 --out popgym.jsonl
    python benchmarks/rl_popgym.py --tasks popgym-RepeatPreviousEasy-v0 --agents gtrxl recurrentppo --seeds 1
    python benchmarks/rl_popgym.py --table popgym.jsonl          # the table of runs done so far
    python benchmarks/rl_popgym.py --table popgym.jsonl --curves curves.png --agents gtrxl   # and the curves
    python benchmarks/rl_popgym.py --table popgym.jsonl --agents gtrxl gru     # two of the agents
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, first_reach, jsonl_rows, markdown_table, mean_se, run_json

EASY = ["popgym-RepeatPreviousEasy-v0", "popgym-RepeatFirstEasy-v0", "popgym-CountRecallEasy-v0",
        "popgym-AutoencodeEasy-v0", "popgym-PositionOnlyCartPoleEasy-v0", "popgym-VelocityOnlyCartpoleEasy-v0",
        "popgym-NoisyPositionOnlyCartPoleEasy-v0", "popgym-MultiarmedBanditEasy-v0", "popgym-HigherLowerEasy-v0",
        "popgym-BattleshipEasy-v0", "popgym-ConcentrationEasy-v0", "popgym-MineSweeperEasy-v0",
        "popgym-LabyrinthExploreEasy-v0", "popgym-LabyrinthEscapeEasy-v0"]  # every id with discrete actions
MEDIUM = ["popgym-RepeatPreviousMedium-v0", "popgym-RepeatFirstMedium-v0", "popgym-PositionOnlyCartPoleMedium-v0",
          "popgym-VelocityOnlyCartpoleMedium-v0"]  # where Easy is solved
TASKS = EASY + MEDIUM
TXL_AGENTS = {"gtrxl": [], "trxl": ["--gating", "none"], "gru": ["--core", "gru"], "none": ["--mem-len", "0"],
              "no-prev": ["--no-prev-action"], "prev-only": ["--mem-len", "0", "--prev-action"]}
AGENTS = [*TXL_AGENTS, "recurrentppo", "cleanrl"]
WINDOW = 100  # the last 100 finished episodes
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------- one run of each kind
def curve_point(steps: int, returns: List[float]) -> dict:
    recent = returns[-WINDOW:]
    return {"step": steps, "mean_return": sum(recent) / len(recent) if recent else None}


def run_txl(task: str, agent: str, seed: int, steps: int, root: Path) -> dict:
    run_dir = root / f"{agent}-{task}-{seed}"
    cmd = [sys.executable, "-m", "transformer_xl", "rl", task, "--seed", str(seed), "--threads", "1", "--json",
           "--no-progress", "--run-dir", str(run_dir), *TXL_AGENTS[agent]] + (["--steps", str(steps)] if steps else [])
    result = run_json(cmd, env=ENV)
    if "error" in result:
        return result
    records = jsonl_rows(run_dir / "metrics.jsonl")
    curve = [{"step": r["step"], "mean_return": r["mean_return"]} for r in records]
    return {"mean_return": result["mean_return"], "steps": result["steps"], "seconds": result["seconds"],
            "curve": curve}


RECURRENT = r'''
import json, sys, time
import numpy as np, torch
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
import popgym  # registers the ids
torch.set_num_threads(1)
task, seed, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
curve = []
class Curve(BaseCallback):
    def _on_rollout_end(self):
        buf = [e["r"] for e in self.model.ep_info_buffer]
        curve.append({"step": self.model.num_timesteps, "mean_return": float(np.mean(buf)) if buf else None})
    def _on_step(self):
        return True
model = RecurrentPPO("MlpLstmPolicy", make_vec_env(task, n_envs=16, seed=seed), seed=seed, device="cpu")
start = time.perf_counter()
model.learn(total_timesteps=steps, callback=Curve())
seconds = time.perf_counter() - start
print(json.dumps({"mean_return": curve[-1]["mean_return"], "steps": model.num_timesteps, "seconds": seconds,
                  "curve": curve}))
'''


def run_recurrentppo(task: str, seed: int, steps: int) -> dict:
    return run_json([sys.executable, "-c", RECURRENT, task, str(seed), str(steps)], env=ENV)


# CleanRL's ppo_trxl.py makes its environments as gym.make(env_id, render_mode="debug_rgb_array"), does not import
# popgym, reads a flat Box observation and env.spec.max_episode_steps, and steps a Discrete action space with
# array([a]); POPGym's environments take no render_mode, observe Discrete(n) on the card tasks, declare their length
# as max_episode_length, and (CartPole) reject array([a]). So the script runs unmodified under this launcher (run by
# the python of CleanRL's environment, gymnasium 0.29.0 as memory-gym pins it), which re-registers the task's id to
# make the same POPGym environment without render_mode, its observation flattened (gymnasium's FlattenObservation:
# Discrete(n) one-hot, as SB3 and txl rl see it; a Box stays as it is), array([a]) stepped as a, and
# max_episode_steps its max_episode_length (where its episodes end anyway); runs the script with runpy; and prints
# the episode returns it wrote to TensorBoard as one JSON line.
CLEANRL_LAUNCH = r'''
import importlib, json, runpy, sys
from pathlib import Path
import gymnasium as gym
import numpy as np
import popgym  # noqa: F401  registers the popgym-* ids
import torch
torch.set_num_threads(1)
script, task, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
spec = gym.spec(task)
module, name = spec.entry_point.split(":")
creator = getattr(importlib.import_module(module), name)
class OneAction(gym.ActionWrapper):  # it steps a Discrete space with an array([a]) (its actions are multi-discrete)
    def action(self, action):
        return int(np.asarray(action).reshape(-1)[0])
def make(render_mode=None, **kwargs):
    env = gym.wrappers.FlattenObservation(creator(**{**spec.kwargs, **kwargs}))
    return OneAction(env) if isinstance(env.action_space, gym.spaces.Discrete) else env
length = creator(**spec.kwargs).max_episode_length
gym.register(id=task, entry_point=make, max_episode_steps=length, kwargs={})
sys.path.insert(0, str(Path(script).parent))  # it imports pom_env from its own folder
sys.argv = [script, "--env-id", task, *argv]
runpy.run_path(script, run_name="__main__")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
events = EventAccumulator(str(max(Path("runs").glob("*/events.out.tfevents*")).parent))
events.Reload()
curve = [{"step": p.step, "mean_return": p.value} for p in events.Scalars("episode/r_mean")]
sps = events.Scalars("charts/SPS")[-1]
print(json.dumps({"mean_return": curve[-1]["mean_return"], "steps": sps.step, "seconds": sps.step / sps.value,
                  "curve": curve}))
'''
# The settings CleanRL's documentation (docs/rl-algorithms/ppo-trxl.md) gives for its vector-observation task,
# ProofofMemory-v0, except the memory: 64 steps as txl rl's --mem-len (the script caps it at the episode's length;
# the documentation's 16 is ProofofMemory's whole episode). On CPU (--no-cuda).
CLEANRL_ENVS, CLEANRL_ROLLOUT = 16, 128
CLEANRL_FLAGS = ["--no-cuda", "--num-envs", str(CLEANRL_ENVS), "--num-steps", str(CLEANRL_ROLLOUT),
                 "--num-minibatches", "8", "--update-epochs", "4", "--trxl-num-layers", "4", "--trxl-num-heads", "1",
                 "--trxl-dim", "64", "--trxl-memory-length", "64", "--trxl-positional-encoding", "none",
                 "--vf-coef", "0.1", "--max-grad-norm", "0.5", "--init-lr", "3.0e-4", "--init-ent-coef", "0.001",
                 "--clip-coef", "0.2"]


def run_cleanrl(task: str, seed: int, steps: int, checkout: Path, python: str, root: Path) -> dict:
    """CleanRL's ``ppo_trxl.py``, unmodified, under ``CLEANRL_LAUNCH`` with ``CLEANRL_FLAGS``; ``steps`` rounded up
    to whole iterations of 16 x 128 as txl rl rounds them. ``seconds`` is its learning loop's (from its last SPS),
    the curve its ``episode/r_mean`` (the mean return of its last 100 episodes) after each iteration."""
    script = checkout / "cleanrl" / "ppo_trxl" / "ppo_trxl.py"
    run_root = root / f"cleanrl-{task}-{seed}"
    run_root.mkdir(parents=True, exist_ok=True)
    batch = CLEANRL_ENVS * CLEANRL_ROLLOUT
    total = -(-steps // batch) * batch
    cmd = [python, "-c", CLEANRL_LAUNCH, str(script.resolve()), task, "--seed", str(seed),
           "--total-timesteps", str(total), *CLEANRL_FLAGS]
    return run_json(cmd, cwd=run_root, env=ENV)


# ---------------------------------------------------------------------------- the suite
def done_keys(path: Path) -> set:
    if not path.is_file():
        return set()
    return {(r["task"], r["agent"], r["seed"]) for r in jsonl_rows(path)}


def run_job(job: tuple, args, root: Path, out: Path) -> None:
    task, agent, seed = job
    start = time.perf_counter()
    if agent in TXL_AGENTS:
        result = run_txl(task, agent, seed, args.steps, root)
    elif agent == "recurrentppo":
        result = run_recurrentppo(task, seed, args.steps or txl_steps(task))
    else:
        result = run_cleanrl(task, seed, args.steps or txl_steps(task), args.cleanrl, args.cleanrl_python, root)
    result.update(task=task, agent=agent, seed=seed, wall=round(time.perf_counter() - start, 1),
                  cpu=cpu_description())
    with open(out, "a") as fh:
        fh.write(json.dumps(result) + "\n")
    shown = result.get("error") or f"mean return {result['mean_return']:.3f}, {result['wall']:.0f} s"
    print(f"  {task} {agent} seed {seed}: {shown}", flush=True)


def txl_steps(task: str) -> int:
    """The steps ``txl rl TASK`` runs with no flags (the family preset's, else the default)."""
    from transformer_xl.rl.runner import resolve_settings

    return resolve_settings(task, {})[0].total_steps


def fall_after(curve: List[dict], level: float = 0.9) -> Optional[float]:
    """The largest fall of the curve below its best so far, once it has reached ``level`` (None if it never did)."""
    best, fall = None, 0.0
    for point in curve:
        value = point["mean_return"]
        if value is None:
            continue
        if best is None and value < level:
            continue
        best = value if best is None else max(best, value)
        fall = max(fall, best - value)
    return None if best is None else fall


def table(path: Path, agents: Sequence[str] = AGENTS) -> str:
    """One row per task and agent (of ``agents``): the return, the steps to 90% of the best of the agents shown,
    the largest fall after 0.9, the wall time and the steps per second."""
    rows: Dict[tuple, List[dict]] = {}
    for r in jsonl_rows(path):
        if r["agent"] in agents:
            rows.setdefault((r["task"], r["agent"]), []).append(r)
    best = {}
    for (task, _), runs in rows.items():
        finals = [r["mean_return"] for r in runs if r.get("mean_return") is not None]
        if finals:
            best[task] = max(best.get(task, -1e9), statistics.mean(finals))
    head = ["task", "agent", "mean return (last 100 episodes)", "steps to 90% of the best (median, runs)",
            "largest fall after 0.9 (worst run)", "wall time per run", "steps/s"]
    body = []
    for task in dict.fromkeys(t for t, _ in rows):
        for agent in AGENTS:
            runs = rows.get((task, agent))
            if not runs:
                continue
            errors = [r["error"] for r in runs if "error" in r]
            ok = [r for r in runs if "error" not in r and r.get("mean_return") is not None]
            if not ok:
                body.append([task.removeprefix("popgym-"), agent, f"cannot run: {errors[0][:80]}", "", "", "", ""])
                continue
            finals = [r["mean_return"] for r in ok]
            spread = f" ± {statistics.stdev(finals):.2f}" if len(finals) > 1 else ""
            level = 0.9 * best[task] if best[task] > 0 else None
            hits = [first_reach(r["curve"], level) for r in ok] if level is not None else []
            reached = [h for h in hits if h]
            reach = (f"{statistics.median(reached) / 1000:.0f}k ({len(reached)}/{len(ok)})" if reached
                     else f"never (0/{len(ok)})") if level is not None else "—"
            falls = [f for f in (fall_after(r["curve"]) for r in ok) if f is not None]
            fall = f"{max(falls):.2f} ({len(falls)}/{len(ok)} reached 0.9)" if falls else "—"
            wall = statistics.mean(r["wall"] for r in ok)
            sps = statistics.mean(r["steps"] / r["seconds"] for r in ok)
            body.append([task.removeprefix("popgym-"), agent, f"{statistics.mean(finals):.2f}{spread}", reach, fall,
                         f"{wall / 60:.1f} min", f"{sps:,.0f}"])
    return markdown_table(head, body)


def mean_se_n(values: List[float]) -> str:
    """``mean ± standard error (n)``; the mean alone for one run."""
    return f"{mean_se(values)} ({len(values)})"


def verdict(memory: List[float], none: List[float]) -> str:
    """GTrXL against another agent (the memoryless one, the GRU): above, level (the means within one standard
    error of their difference; with one seed on either side, which has no spread, within 0.05, 2.5% of POPGym's
    range) or below."""
    if not memory or not none:
        return ""
    diff = statistics.mean(memory) - statistics.mean(none)
    if min(len(memory), len(none)) < 2:
        se = 0.05
    else:
        se = sum(statistics.variance(v) / len(v) for v in (memory, none)) ** 0.5
    if abs(diff) <= se or abs(diff) < 0.005:
        return "level"
    return "above" if diff > 0 else "**below**"


def suite_table(path: Path, agents: List[str]) -> str:
    """One row per task: each agent's final return (mean ± standard error over the seeds, and how many), and GTrXL
    against the memoryless agent and against the GRU (:func:`verdict`), where they ran."""
    finals: Dict[tuple, List[float]] = {}
    for r in jsonl_rows(path):
        if "error" not in r and r.get("mean_return") is not None and r["agent"] in agents:
            finals.setdefault((r["task"], r["agent"]), []).append(r["mean_return"])
    shown = [a for a in agents if any(k[1] == a for k in finals)]
    others = {"none": "no memory", "gru": "the GRU"}
    against = [a for a in others if a in shown and "gtrxl" in shown]
    lines = ["| task | " + " | ".join([*shown, *(f"GTrXL against {others[a]}" for a in against)]) + " |",
             "|---|" + "---|" * (len(shown) + len(against))]
    for task in dict.fromkeys(t for t, _ in finals):
        cells = [mean_se_n(finals[(task, a)]) if (task, a) in finals else "" for a in shown]
        cells += [verdict(finals.get((task, "gtrxl"), []), finals.get((task, a), [])) for a in against]
        lines.append(f"| {task.removeprefix('popgym-')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(path: Path, out: Path, agents: List[str]) -> None:
    """One panel per task: every run's mean return of the last 100 episodes against the steps (one line per seed,
    a colour per agent), with the 0.9 level dashed."""
    from transformer_xl.analysis.figures import pyplot, save_figure

    plt = pyplot()
    runs: Dict[str, Dict[str, List[dict]]] = {}
    for r in jsonl_rows(path):
        if "error" not in r and r.get("curve") and r["agent"] in agents:
            runs.setdefault(r["task"], {}).setdefault(r["agent"], []).append(r)
    tasks = list(runs)
    cols = min(3, len(tasks))
    rows = (len(tasks) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.2 * rows), squeeze=False, dpi=100)
    colours = dict(zip(AGENTS, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for ax, task in zip(axes.flat, tasks):
        for agent, agent_runs in runs[task].items():
            for i, r in enumerate(sorted(agent_runs, key=lambda r: r["seed"])):
                points = [(p["step"], p["mean_return"]) for p in r["curve"] if p["mean_return"] is not None]
                ax.plot([x / 1e3 for x, _ in points], [y for _, y in points], color=colours[agent], lw=1,
                        alpha=0.85, label=agent if i == 0 else None)
        ax.axhline(0.9, color="grey", ls="--", lw=0.8)
        ax.set_title(task.removeprefix("popgym-"), fontsize=9)
        ax.set_xlabel("environment steps (thousands)", fontsize=8)
        ax.set_ylabel("mean return, last 100 episodes", fontsize=8)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    save_figure(fig, out, "--curves")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--agents", nargs="*", choices=AGENTS, help="the agents to run (default: txl rl's "
                        f"{', '.join(TXL_AGENTS)}); with --table, the agents shown (default: all in the file)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1_000_000,
                        help="environment steps per run (default: 1M; 0: txl rl's own)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--out", type=Path, default=Path("popgym_suite.jsonl"))
    parser.add_argument("--cleanrl", type=Path, help="a checkout of vwxyzjn/cleanrl (for --agents cleanrl)")
    parser.add_argument("--cleanrl-python", default=sys.executable, help="the python of CleanRL's environment")
    parser.add_argument("--table", type=Path, help="only print the table of this file")
    parser.add_argument("--curves", type=Path, help="with --table: also plot its runs' learning curves (PNG)")
    args = parser.parse_args()
    if args.table:
        shown = args.agents or AGENTS
        print(suite_table(args.table, shown))
        print()
        print(table(args.table, shown))
        if args.curves:
            plot_curves(args.table, args.curves, shown)
        return
    args.agents = args.agents or list(TXL_AGENTS)
    import torch

    torch.set_num_threads(1)  # as in the runs, so that the line names them
    print(cpu_description(), f"| {args.parallel} runs at a time", flush=True)
    skip = done_keys(args.out)
    jobs = [(task, agent, seed) for seed in range(1, args.seeds + 1) for task in args.tasks for agent in args.agents
            if (task, agent, seed) not in skip]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        for future in [pool.submit(run_job, job, args, Path(tmp), args.out) for job in jobs]:
            future.result()
    print()
    print(table(args.out))


if __name__ == "__main__":
    main()
