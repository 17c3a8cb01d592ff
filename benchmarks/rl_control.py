"""Partially observed continuous control, side by side: ``txl rl``'s agents and Stable-Baselines3's on the same
tasks, seeds and environment steps.

Tasks (Box actions): POPGym's ``PositionOnlyPendulumEasy`` and ``NoisyPositionOnlyPendulumEasy`` (the angular
velocity hidden), and Gymnasium's MuJoCo tasks with their velocities hidden (``mujoco-HalfCheetah-P-v5``,
``-Hopper-P-``, ``-Walker2d-P-``: the "-P" tasks of Ni et al., ICML 2022) or their positions hidden
(``mujoco-HalfCheetah-V-v5``), as ``txl rl`` registers them (``transformer_xl.rl.envs.observe_only``).

Agents:

* ``gtrxl``: ``txl rl TASK`` with no flags (GTrXL, the family's preset where there is one);
* ``gru``: ``--core gru``; ``none``: ``--mem-len 0`` (the current observation only);
* ``recurrentppo``: sb3-contrib's ``RecurrentPPO("MlpLstmPolicy")`` at its defaults (needs ``pip install
  sb3-contrib``), ``ppo``: SB3's ``PPO("MlpPolicy")`` at its defaults, both on 16 environments under
  ``VecNormalize`` (as the RL Zoo runs MuJoCo);
* ``recurrentppo-zoo``: ``RecurrentPPO`` at the RL Zoo's settings for the task (``hyperparams/ppo_lstm.yml``):
  ``PendulumNoVel-v1``'s for the pendulums (the same task: the velocity hidden), ``HalfCheetah-v3``'s, ``Hopper-v3``'s
  and ``Walker2d-v3``'s for those bodies (the Zoo tunes them on the full observation; it has no "-P" entries);
* ``ppo-full``: SB3's ``PPO`` on the fully observed task (``HalfCheetah-v5``; the pendulum's Markov state through
  POPGym's ``Markovian`` wrapper): how much a policy can get when nothing is hidden.

Each run is one process with one torch thread, ``--parallel`` at a time, every agent on the same environment steps
(``--steps``, 1M by default). Two returns are kept: the mean of the last 100 episodes while learning (sampled
actions), and SB3's ``evaluate_policy`` over 100 episodes with the most likely actions on fresh environments
(``txl rl-eval`` for ``txl rl``'s agents, which carries the memory as ``evaluate_policy`` does). Every finished run
is a line of ``--out`` (JSON, with the CPU it ran on); the table is printed from that file::

    python benchmarks/rl_control.py --seeds 3 --out control.jsonl
    python benchmarks/rl_control.py --tasks popgym-PositionOnlyPendulumEasy-v0 --agents gtrxl ppo --seeds 1
    python benchmarks/rl_control.py --table control.jsonl
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
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).parent))
import torch
from common import cpu_description, first_reach, jsonl_rows, markdown_table, run_json

TASKS = ["popgym-PositionOnlyPendulumEasy-v0", "popgym-NoisyPositionOnlyPendulumEasy-v0", "mujoco-HalfCheetah-P-v5",
         "mujoco-Hopper-P-v5", "mujoco-Walker2d-P-v5", "mujoco-HalfCheetah-V-v5"]
TXL_AGENTS = {"gtrxl": [], "gru": ["--core", "gru"], "none": ["--mem-len", "0"]}
SB3_AGENTS = ["recurrentppo", "recurrentppo-zoo", "ppo", "ppo-full"]
AGENTS = [*TXL_AGENTS, *SB3_AGENTS]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
torch.set_num_threads(1)  # as in the runs, so that the line names them
CPU = cpu_description()


# The RL Zoo's RecurrentPPO settings (hyperparams/ppo_lstm.yml), by the task's body; "normalize" is VecNormalize's.
ZOO_MUJOCO_POLICY = {"log_std_init": -2, "ortho_init": False, "activation_fn": "ReLU",
                     "net_arch": {"pi": [256, 256], "vf": [256, 256]}}
ZOO = {
    "Pendulum": {"n_envs": 4, "normalize": False, "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9, "n_epochs": 10,
                 "ent_coef": 0.0, "learning_rate": 1e-3, "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4},
    "HalfCheetah": {"n_envs": 1, "normalize": True, "batch_size": 64, "n_steps": 512, "gamma": 0.98,
                    "learning_rate": 2.0633e-05, "ent_coef": 0.000401762, "clip_range": 0.1, "n_epochs": 20,
                    "gae_lambda": 0.92, "max_grad_norm": 0.8, "vf_coef": 0.58096, "policy_kwargs": ZOO_MUJOCO_POLICY},
    "Hopper": {"n_envs": 1, "normalize": True, "batch_size": 32, "n_steps": 512, "gamma": 0.999,
               "learning_rate": 9.80828e-05, "ent_coef": 0.00229519, "clip_range": 0.2, "n_epochs": 5,
               "gae_lambda": 0.99, "max_grad_norm": 0.7, "vf_coef": 0.835671, "policy_kwargs": ZOO_MUJOCO_POLICY},
    "Walker2d": {"n_envs": 1, "normalize": True, "batch_size": 32, "n_steps": 512, "gamma": 0.99,
                 "learning_rate": 5.05041e-05, "ent_coef": 0.000585045, "clip_range": 0.1, "n_epochs": 20,
                 "gae_lambda": 0.95, "max_grad_norm": 1.0, "vf_coef": 0.871923},
}


def sb3_settings(task: str, agent: str) -> dict:
    """The constructor's keywords of an SB3 agent on a task, with ``n_envs`` and ``normalize`` (VecNormalize)."""
    if agent != "recurrentppo-zoo":
        return {"n_envs": 16, "normalize": True}
    body = next((b for b in ZOO if b in task), None)
    if body is None:
        return {"error": f"the RL Zoo has no RecurrentPPO settings for {task}"}
    return ZOO[body]


def run_txl(task: str, agent: str, seed: int, steps: int, root: Path) -> dict:
    run_dir = root / f"{agent}-{task}-{seed}"
    head = [sys.executable, "-m", "transformer_xl"]
    result = run_json([*head, "rl", task, "--seed", str(seed), "--steps", str(steps), "--threads", "1", "--json",
                       "--no-progress", "--run-dir", str(run_dir), *TXL_AGENTS[agent]], env=ENV)
    if "error" in result:
        return result
    played = run_json([*head, "rl-eval", str(run_dir), "--episodes", "100", "--seed", "1000", "--json"], env=ENV)
    records = jsonl_rows(run_dir / "metrics.jsonl")
    return {"mean_return": result["mean_return"], "evaluated": played.get("mean_return"), "steps": result["steps"],
            "seconds": result["seconds"], "curve": [{"step": r["step"], "mean_return": r["mean_return"]}
                                                    for r in records]}


# SB3's agents in a child process: the task made partial or full, VecNormalize, learn, then evaluate_policy with the
# normalisation's statistics frozen and the environment's own rewards.
SB3_SCRIPT = r'''
import json, sys, time
import numpy as np, torch
import gymnasium as gym
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecNormalize
from transformer_xl.rl.envs import register_env_family
torch.set_num_threads(1)
task, agent, seed, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
register_env_family(task)
def make():
    if agent != "ppo-full":
        return gym.make(task)
    if task.startswith("mujoco-"):
        return gym.make(task.removeprefix("mujoco-").replace("-P-", "-").replace("-V-", "-"))
    from popgym.core.observability import Observability
    from popgym.wrappers import Markovian
    return Markovian(gym.make(task).unwrapped, Observability.FULL)
settings = json.loads(sys.argv[5])
n_envs, normalize = settings.pop("n_envs"), settings.pop("normalize")
policy_kwargs = dict(settings.pop("policy_kwargs", {}))
if "activation_fn" in policy_kwargs:
    policy_kwargs["activation_fn"] = getattr(torch.nn, policy_kwargs["activation_fn"])
env = make_vec_env(make, n_envs=n_envs, seed=seed)
env = VecNormalize(env, gamma=settings.get("gamma", 0.99)) if normalize else env
if agent.startswith("recurrentppo"):
    from sb3_contrib import RecurrentPPO
    model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", policy_kwargs=policy_kwargs, **settings)
else:
    model = PPO("MlpPolicy", env, seed=seed, device="cpu")
curve = []
class Curve(BaseCallback):
    def _on_rollout_end(self):
        buf = [e["r"] for e in self.model.ep_info_buffer]
        curve.append({"step": self.model.num_timesteps, "mean_return": float(np.mean(buf)) if buf else None})
    def _on_step(self):
        return True
start = time.perf_counter()
model.learn(total_timesteps=steps, callback=Curve())
seconds = time.perf_counter() - start
test = make_vec_env(make, n_envs=1, seed=seed + 1000)
if normalize:
    test = VecNormalize(test, training=False, norm_reward=False)
    test.obs_rms = env.obs_rms
evaluated, _ = evaluate_policy(model, test, n_eval_episodes=100, deterministic=True)
print(json.dumps({"mean_return": curve[-1]["mean_return"], "evaluated": float(evaluated),
                  "steps": model.num_timesteps, "seconds": seconds, "curve": curve}))
'''


def run_sb3(task: str, agent: str, seed: int, steps: int) -> dict:
    settings = sb3_settings(task, agent)
    if "error" in settings:
        return settings
    return run_json([sys.executable, "-c", SB3_SCRIPT, task, agent, str(seed), str(steps), json.dumps(settings)],
                    env=ENV)


def run_job(job: tuple, args, root: Path, out: Path) -> None:
    task, agent, seed = job
    start = time.perf_counter()
    result = run_txl(task, agent, seed, args.steps, root) if agent in TXL_AGENTS else \
        run_sb3(task, agent, seed, args.steps)
    result.update(task=task, agent=agent, seed=seed, wall=round(time.perf_counter() - start, 1), cpu=CPU)
    with open(out, "a") as fh:
        fh.write(json.dumps(result) + "\n")
    shown = result.get("error") or (f"mean return {result['mean_return']}, evaluated {result['evaluated']}, "
                                    f"{result['wall']:.0f} s")
    print(f"  {task} {agent} seed {seed}: {shown}", flush=True)


def spread(values: List[float], digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return f"{statistics.mean(values):,.{digits}f} ± {statistics.stdev(values):,.{digits}f}"


def largest_fall(curve: List[dict]) -> float:
    """How far a learning curve fell below its running best once it had reached 90% of its best, as a fraction
    of its best (0 when it never fell): the stability the goals ask for, "no fall of more than 10%"."""
    values = [p["mean_return"] for p in curve if p["mean_return"] is not None]
    best = max(values)
    if best <= 0:
        return 0.0
    start = next(i for i, v in enumerate(values) if v >= 0.9 * best)
    peak, fall = values[start], 0.0
    for v in values[start:]:
        peak = max(peak, v)
        fall = max(fall, peak - v)
    return fall / best


def table(path: Path) -> str:
    rows: Dict[tuple, List[dict]] = {}
    for r in jsonl_rows(path):
        rows.setdefault((r["task"], r["agent"]), []).append(r)
    best = {}
    for (task, _), runs in rows.items():
        finals = [r["mean_return"] for r in runs if r.get("mean_return") is not None]
        if finals:
            best[task] = max(best.get(task, -1e9), statistics.mean(finals))
    head = ["task", "agent", "seeds", "mean return (last 100 episodes)",
            "evaluate_policy (100 episodes, most likely actions)", "steps to 90% of the best (median, runs)",
            "largest fall after 90% of its best (runs over 10%)", "steps/s while learning", "wall time per run"]
    body = []
    for task in dict.fromkeys(t for t, _ in rows):
        for agent in AGENTS:
            runs = [r for r in rows.get((task, agent), []) if "error" not in r and r.get("mean_return") is not None]
            if not runs:
                errors = [r["error"] for r in rows.get((task, agent), []) if "error" in r]
                if errors:
                    body.append([task, agent, "", f"cannot run: {errors[0][:80]}", "", "", "", "", ""])
                continue
            finals = [r["mean_return"] for r in runs]
            digits = 0 if task.startswith("mujoco-") else 2  # MuJoCo's returns in whole units, POPGym's in [-1, 1]
            evaluated = [r["evaluated"] for r in runs if r.get("evaluated") is not None]
            level = 0.9 * best[task] if best[task] > 0 else None
            hits = [h for h in (first_reach(r["curve"], level) for r in runs) if h] if level is not None else []
            reach = (f"{statistics.median(hits) / 1000:.0f}k ({len(hits)}/{len(runs)})" if hits
                     else f"never (0/{len(runs)})") if level is not None else "—"
            falls = [largest_fall(r["curve"]) for r in runs]
            fell = f"{max(falls):.0%} ({sum(f > 0.1 for f in falls)}/{len(runs)})"
            sps = statistics.mean(r["steps"] / r["seconds"] for r in runs)
            wall = statistics.mean(r["wall"] for r in runs)
            played = spread(evaluated, digits) if evaluated else "—"
            body.append([task, agent, len(runs), spread(finals, digits), played, reach, fell, f"{sps:,.0f}",
                         f"{wall / 60:.1f} min"])
    return markdown_table(head, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--agents", nargs="*", default=["gtrxl", "none", "ppo", "ppo-full"], choices=AGENTS)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--parallel", type=int, default=2, help="runs at a time, one thread each (default 2)")
    parser.add_argument("--out", type=Path, default=Path("control.jsonl"))
    parser.add_argument("--table", type=Path, help="only print the table of this file")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    print(CPU, f"| {args.parallel} runs at a time", flush=True)
    done = {(r["task"], r["agent"], r["seed"]) for r in jsonl_rows(args.out)} if args.out.is_file() else set()
    jobs = [(task, agent, seed) for seed in range(1, args.seeds + 1) for task in args.tasks for agent in args.agents
            if (task, agent, seed) not in done]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.parallel) as pool:
        for future in [pool.submit(run_job, job, args, Path(tmp), args.out) for job in jobs]:
            future.result()
    print()
    print(table(args.out))


if __name__ == "__main__":
    main()
