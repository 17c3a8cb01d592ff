"""Memory in Stable-Baselines3's own terms: ``TransformerXLPPO`` beside sb3-contrib's ``RecurrentPPO`` and plain PPO.

Agents, each with its library's defaults and ``seed=s``, on 16 environments from ``make_vec_env(task, n_envs=16,
seed=s)``:

* ``txlppo``: ``transformer_xl.sb3.TransformerXLPPO("MlpPolicy", env)`` (GTrXL, ``mem_len=64``);
* ``recurrentppo``: sb3-contrib's ``RecurrentPPO("MlpLstmPolicy", env)`` (an LSTM);
* ``ppo``: SB3's ``PPO("MlpPolicy", env)``, no memory (the current observation only).

Every agent learns for the same environment steps (``--steps``; SB3 stops at the first whole rollout past them:
PPO's default rollout of 2048 steps x 16 environments makes 300k into 327,680), then SB3's ``evaluate_policy``
judges it: 100 episodes, deterministic actions, on a fresh environment (seed ``1000 + s``), the memory carried in
``predict``'s state for the agents that have one. Reported per task x agent: the evaluation's mean return (mean ±
standard deviation over the seeds of each seed's mean over 100 episodes), the environment steps at which the
training curve (the mean of ``ep_info_buffer``, SB3's last 100 episodes, at each rollout's end) first reached 0.8
(median over the runs that did, and how many), environment steps per second while learning (``learn()``'s wall
time) and the wall time of a run (learning and evaluation), as a markdown table with the CPU named.

Each run is one process with one torch thread, ``--parallel`` at a time (default 1), and one JSON line of
``--out`` when it is done, so a suite can be stopped and started again; the table is printed from that file, every
run in it counted::

    python benchmarks/sb3_memory.py --agents txlppo ppo --seeds 3 --out sb3.jsonl
    python benchmarks/sb3_memory.py --agents recurrentppo --seeds 1 --out sb3.jsonl   # ~190 steps/s: 26 min a run
    python benchmarks/sb3_memory.py --table sb3.jsonl          # the table of the runs done so far
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).parent))
from common import first_reach, jsonl_rows, markdown_table, run_json

TASKS = ["popgym-RepeatPreviousEasy-v0", "popgym-RepeatFirstEasy-v0", "popgym-PositionOnlyCartPoleEasy-v0"]
AGENTS = {"txlppo": "TransformerXLPPO (GTrXL)", "recurrentppo": "RecurrentPPO (LSTM)", "ppo": "PPO (no memory)"}
N_ENVS = 16
EVAL_EPISODES = 100
EVAL_SEED = 1000
LEVEL = 0.8
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


# ---------------------------------------------------------------------------- one run (in its own process)
def run_one(task: str, agent: str, seed: int, steps: int) -> dict:
    import numpy as np
    import popgym  # noqa: F401  registers the popgym-* ids
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    start = time.perf_counter()
    env = make_vec_env(task, n_envs=N_ENVS, seed=seed)
    if agent == "txlppo":
        from transformer_xl.sb3 import TransformerXLPPO

        model = TransformerXLPPO("MlpPolicy", env, seed=seed)
    elif agent == "recurrentppo":
        from sb3_contrib import RecurrentPPO

        model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu")
    else:
        from stable_baselines3 import PPO

        model = PPO("MlpPolicy", env, seed=seed, device="cpu")
    curve: List[dict] = []

    class Curve(BaseCallback):
        def _on_rollout_end(self) -> None:
            returns = [e["r"] for e in self.model.ep_info_buffer]
            curve.append({"step": self.model.num_timesteps,
                          "mean_return": float(np.mean(returns)) if returns else None})

        def _on_step(self) -> bool:
            return True

    learn_start = time.perf_counter()
    model.learn(total_timesteps=steps, callback=Curve())
    seconds = time.perf_counter() - learn_start
    eval_start = time.perf_counter()
    rewards, _ = evaluate_policy(model, make_vec_env(task, n_envs=1, seed=EVAL_SEED + seed),
                                 n_eval_episodes=EVAL_EPISODES, deterministic=True, return_episode_rewards=True)
    from common import cpu_description

    return {"cpu": cpu_description(), "eval_mean": float(np.mean(rewards)), "eval_std": float(np.std(rewards)),
            "eval_seconds": round(time.perf_counter() - eval_start, 2), "steps": model.num_timesteps,
            "seconds": round(seconds, 2), "train_return": curve[-1]["mean_return"] if curve else None,
            "wall": round(time.perf_counter() - start, 1), "curve": curve}


# ---------------------------------------------------------------------------- the suite
def done_keys(path: Path) -> set:
    if not path.is_file():
        return set()
    return {(r["task"], r["agent"], r["seed"]) for r in jsonl_rows(path) if "error" not in r}


def run_job(job: tuple, steps: int, out: Path) -> None:
    task, agent, seed = job
    cmd = [sys.executable, __file__, "--run", task, agent, str(seed), str(steps)]
    result = run_json(cmd, env=ENV)
    result.update(task=task, agent=agent, seed=seed)
    with open(out, "a") as fh:
        fh.write(json.dumps(result) + "\n")
    shown = result.get("error") or (f"evaluate_policy {result['eval_mean']:.3f}, {result['steps']} steps in "
                                    f"{result['seconds']:.0f} s, {result['wall']:.0f} s in all")
    print(f"  {task} {agent} seed {seed}: {shown}", flush=True)


def table(path: Path) -> str:
    rows: Dict[tuple, List[dict]] = {}
    for r in jsonl_rows(path):
        rows.setdefault((r["task"], r["agent"]), []).append(r)
    cpus = sorted({r["cpu"] for r in jsonl_rows(path) if "cpu" in r})
    head = ["task", "agent", "seeds", "evaluate_policy mean return (100 episodes, deterministic)",
            f"steps to {LEVEL} (median, runs)", "steps/s while learning", "wall time per run"]
    body = []
    for task in dict.fromkeys(t for t, _ in rows):
        for agent in AGENTS:
            runs = rows.get((task, agent))
            if not runs:
                continue
            ok = [r for r in runs if "error" not in r]
            name = task.removeprefix("popgym-")
            if not ok:
                body.append([name, AGENTS[agent], 0, f"cannot run: {runs[0]['error'][:80]}", "", "", ""])
                continue
            evals = [r["eval_mean"] for r in ok]
            spread = f" ± {statistics.stdev(evals):.2f}" if len(evals) > 1 else " (1 seed)"
            reached = [h for h in (first_reach(r["curve"], LEVEL) for r in ok) if h]
            reach = f"{statistics.median(reached) / 1000:.0f}k ({len(reached)}/{len(ok)})" if reached else \
                f"never (0/{len(ok)})"
            sps = statistics.mean(r["steps"] / r["seconds"] for r in ok)
            wall = statistics.mean(r["wall"] for r in ok)
            body.append([name, AGENTS[agent], len(ok), f"{statistics.mean(evals):.2f}{spread}", reach, f"{sps:,.0f}",
                         f"{wall / 60:.1f} min"])
    return "\n".join([*cpus, "", markdown_table(head, body)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--agents", nargs="*", default=list(AGENTS), choices=list(AGENTS))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N of each task x agent (default 3)")
    parser.add_argument("--steps", type=int, default=300_000, help="environment steps per run (default 300000)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time, one thread each (default 1)")
    parser.add_argument("--out", type=Path, default=Path("sb3_memory.jsonl"))
    parser.add_argument("--table", type=Path, help="only print the table of this file")
    parser.add_argument("--run", nargs=4, metavar=("TASK", "AGENT", "SEED", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        task, agent, seed, steps = args.run
        print(json.dumps(run_one(task, agent, int(seed), int(steps))))
        return
    if args.table:
        print(table(args.table))
        return
    import torch
    from common import cpu_description

    torch.set_num_threads(1)  # as in the runs, so that the line names them
    print(cpu_description(), f"| {args.parallel} runs at a time", flush=True)
    skip = done_keys(args.out)
    jobs = [(task, agent, seed) for seed in range(1, args.seeds + 1) for task in args.tasks for agent in args.agents
            if (task, agent, seed) not in skip]
    with ThreadPoolExecutor(args.parallel) as pool:
        for future in [pool.submit(run_job, job, args.steps, args.out) for job in jobs]:
            future.result()
    print()
    print(table(args.out))


if __name__ == "__main__":
    main()
