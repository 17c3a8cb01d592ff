"""Scaling out with RLlib: POPGym tasks learnt by RLlib's PPO with ``TransformerXLRLModule``, RLlib's own LSTM and
its memoryless default module, on 1, 2 or 4 environment runners of a local Ray, with environment steps per second,
the return at equal steps, and a checkpoint played back by ``txl rl-eval``.

Each run starts its own local Ray (``ray.init``; the CPUs it is told of are at least the runners + 1, so 4 runners
are scheduled on a 2-core machine too: there they share the cores), or joins a running cluster with ``--address``,
and trains ``--steps`` environment steps (or ``--minutes``) in iterations of ``--batch`` steps, with the learner in
this process. Modules (``--modules``):

* ``txl``: ``TransformerXLRLModule`` with ``model_config_for(env_id)`` and ``ppo_training(env_id)`` (``txl rl``'s
  preset for the task: gamma 0.9 on POPGym's immediate-reward tasks);
* ``lstm``: RLlib's LSTM (``model_config={"use_lstm": True, "max_seq_len": 20}``) at RLlib's PPO defaults;
  ``lstm-same``: the same LSTM with the txl module's ``ppo_training(env_id)`` (the PPO settings held equal);
* ``default``: RLlib's memoryless default module at its PPO defaults;

the Discrete observations of RLlib's own modules one-hot through RLlib's ``FlattenObservations`` connector (its
default encoders take no Discrete observation). ``--play`` saves each ``txl`` run with ``algo.save()``, restores
it with ``Algorithm.from_checkpoint()``, evaluates it there over 100 episodes with the most likely actions
(``algo.evaluate()``), then plays the same checkpoint's agent (``save_agent``) with ``txl rl-eval`` over 100
episodes. Every finished run is a line of ``--out`` (JSON, with the CPU and the Ray version; runs already there are
skipped), and a markdown table is printed from that file::

    python benchmarks/rllib_scale.py --runners 1 2 4 --steps 60000 --out scale.jsonl       # the scaling curve
    python benchmarks/rllib_scale.py --modules txl lstm default --seeds 3 --steps 150000 \\
        --tasks RepeatPreviousEasy RepeatFirstEasy PositionOnlyCartPoleEasy NoisyPositionOnlyCartPoleEasy \\
        --play --out rllib.jsonl                                                            # side by side
    python benchmarks/rllib_scale.py --modules txl --steps 1000000 --minutes 25 --play      # the goal run
    python benchmarks/rllib_scale.py --table rllib.jsonl
    python benchmarks/rllib_scale.py --address auto --runners auto --steps 10000000  # on a node of a running cluster

Before building the algorithm, what it asks Ray for (RLlib's own accounting: the driver, each env runner, the
evaluation runner, remote learners) is compared with the cluster's resources, and a shortfall is one line and
exit status 2 (``TransformerXLRLModule.check_cluster``); ``--runners auto`` takes as many runners as the cluster's
CPUs hold beside the rest (``TransformerXLRLModule.runners_that_fit``).

On one machine ``txl rl`` steps faster (no actors, no serialisation of every step's state, the decoding cache):
docs/RL.md, "RLlib". RLlib pays where the environments are spread over the machines of a cluster
(docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import cpu_description, first_reach, jsonl_rows, markdown_table, run_json

ENV_NAME = "rllib-scale-task"
TASKS = {
    "RepeatPreviousEasy": "popgym.envs.repeat_previous:RepeatPreviousEasy",
    "RepeatFirstEasy": "popgym.envs.repeat_first:RepeatFirstEasy",
    "PositionOnlyCartPoleEasy": "popgym.envs.position_only_cartpole:PositionOnlyCartPoleEasy",
    "NoisyPositionOnlyCartPoleEasy": "popgym.envs.noisy_position_only_cartpole:NoisyPositionOnlyCartPoleEasy",
    "CountRecallEasy": "popgym.envs.count_recall:CountRecallEasy",
}
MODULES = ("txl", "lstm", "lstm-same", "default")
LEVEL = 0.8  # the return whose first step is reported


def env_class(task: str):
    module, _, name = TASKS.get(task, task).partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def env_id(task: str) -> str:
    """``txl rl``'s id of a POPGym task (its presets and ``txl rl-eval`` know it by this name)."""
    return f"popgym-{task}-v0" if task in TASKS else task


def config_for(args, task: str, module: str, runners: int, seed: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from transformer_xl.rllib import TransformerXLRLModule

    cls = env_class(task)
    register_env(ENV_NAME, lambda env_config: cls())  # POPGym's classes take no arguments; RLlib passes one
    config = (PPOConfig()
              .environment(ENV_NAME)
              .env_runners(num_env_runners=runners, num_envs_per_env_runner=args.envs_per_runner)
              .learners(num_learners=0)
              .evaluation(evaluation_num_env_runners=1, evaluation_duration=100,
                          evaluation_duration_unit="episodes", evaluation_config={"explore": False})
              .debugging(seed=seed))
    if module == "txl":
        spec = RLModuleSpec(module_class=TransformerXLRLModule,
                            model_config=TransformerXLRLModule.model_config_for(env_id(task)))
        config = config.rl_module(rl_module_spec=spec)
    else:
        config = config.env_runners(env_to_module_connector=lambda env, spaces, device: FlattenObservations())
        # a dict leaves out DefaultModelConfig's max_seq_len (20), which a stateful module must have
        config = config.rl_module(model_config={} if module == "default" else {"use_lstm": True, "max_seq_len": 20})
    training = TransformerXLRLModule.ppo_training(env_id(task)) if module in ("txl", "lstm-same") else {}
    return config.training(**{**training, "train_batch_size_per_learner": args.batch})


def play(algo, task: str, directory: Path) -> dict:
    """``algo.save()``, ``Algorithm.from_checkpoint()``, 100 episodes there and 100 under ``txl rl-eval``."""
    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, EVALUATION_RESULTS, NUM_EPISODES

    saved = algo.save(str(directory / "checkpoint"))
    path = getattr(getattr(saved, "checkpoint", None), "path", None) or str(saved)
    algo.stop()
    restored = Algorithm.from_checkpoint(path)
    try:
        results = restored.evaluate()
        results = results.get(EVALUATION_RESULTS, results)  # Ray 2.60 returns the evaluation's results alone
        rllib_return = float(results[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN])
        episodes = int(results[ENV_RUNNER_RESULTS].get(NUM_EPISODES, 0))
        agent_dir = restored.get_module().save_agent(directory / "agent", env_id(task))
    finally:
        restored.stop()
    played = run_json([sys.executable, "-m", "transformer_xl", "rl-eval", str(agent_dir), "--episodes", "100",
                       "--seed", "1000", "--threads", "1", "--json"])
    if "error" in played:
        raise SystemExit(f"txl rl-eval failed: {played['error']}")
    return {"rllib_eval_return": rllib_return, "rllib_eval_episodes": episodes,
            "txl_rl_eval_return": float(played["mean_return"]), "txl_rl_eval_episodes": int(played["episodes"])}


def run(args, task: str, module: str, runners: int, seed: int) -> dict:
    import ray
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        ENV_RUNNER_SAMPLING_TIMER,
        EPISODE_RETURN_MEAN,
        LEARNER_UPDATE_TIMER,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        TIMERS,
    )

    from transformer_xl.errors import ConfigError
    from transformer_xl.rllib import TransformerXLRLModule

    if args.address:  # a running cluster (ray start; ray job submit): its nodes' CPUs
        ray.init(address=args.address, log_to_driver=False)
    else:
        cpus = os.cpu_count() or 1
        ray.init(address="local", num_cpus=cpus if runners == "auto" else max(cpus, runners + 2),
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        try:  # what the cluster lacks is one line, not actors waiting for it forever
            if runners == "auto":
                runners = TransformerXLRLModule.runners_that_fit(config_for(args, task, module, 1, seed))
            config = config_for(args, task, module, runners, seed)
            TransformerXLRLModule.check_cluster(config)
        except ConfigError as exc:
            print(f"rllib_scale: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        label = f"{task} {module} {runners} runners seed {seed}"
        algo = config.build_algo()
        start, steps, curve, sampling, learning = time.perf_counter(), 0, [], 0.0, 0.0
        while steps < args.steps and time.perf_counter() - start < 60 * args.minutes:
            result = algo.train()
            steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            value = result[ENV_RUNNER_RESULTS].get(EPISODE_RETURN_MEAN)
            curve.append({"step": steps, "mean_return": None if value is None else float(value)})
            timers = result.get(TIMERS, {})  # RLlib's means over its recent iterations, per iteration
            sampling += float(timers.get(ENV_RUNNER_SAMPLING_TIMER, 0.0))
            learning += float(timers.get(LEARNER_UPDATE_TIMER, 0.0))
            print(f"{label}: {steps} steps, {time.perf_counter() - start:.0f} s, mean return {value}",
                  file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
        row = {"task": task, "module": module, "runners": runners, "seed": seed, "steps": steps,
               "seconds": seconds, "steps_per_s": steps / seconds, "mean_return": curve[-1]["mean_return"],
               "sampling_s": sampling, "learning_s": learning, "curve": curve, "ray": ray.__version__,
               "cpu": cpu_description(), "envs_per_runner": args.envs_per_runner, "batch": args.batch}
        if args.play and module == "txl":
            with tempfile.TemporaryDirectory() as tmp:
                row.update(play(algo, task, Path(tmp)))
        else:
            algo.stop()
    finally:
        ray.shutdown()
    return row


def spread(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def table(rows) -> str:
    """Per task, module and runner count: seeds, return at the end, steps to :data:`LEVEL`, steps/s, time, and
    the checkpoint's returns under RLlib and ``txl rl-eval``."""
    groups = {}
    for row in rows:
        groups.setdefault((row["task"], row["module"], row["runners"]), []).append(row)
    first = rows[0]
    head = ["task", "module", "runners", "seeds", "steps", "mean return at the end", f"steps to {LEVEL} (runs)",
            "steps/s", "minutes a run", "checkpoint: RLlib evaluate / txl rl-eval (100 episodes)"]
    body = []
    for (task, module, runners), group in groups.items():
        reach = [first_reach(r["curve"], LEVEL) for r in group]
        hits = sorted(r for r in reach if r is not None)
        runs = f"({len(hits)}/{len(group)})"
        reached = f"{hits[len(hits) // 2] / 1000:.0f}k {runs}" if hits else f"never {runs}"
        played = "—"
        if "rllib_eval_return" in group[0]:
            played = (f"{spread([r['rllib_eval_return'] for r in group])} / "
                      f"{spread([r['txl_rl_eval_return'] for r in group])}")
        body.append([task, module, runners, len(group), f"{min(r['steps'] for r in group):,}",
                     spread([r["mean_return"] for r in group]), reached,
                     f"{statistics.mean(r['steps_per_s'] for r in group):,.0f}",
                     f"{statistics.mean(r['seconds'] for r in group) / 60:.1f}", played])
    return (f"Ray {first['ray']}; {first['cpu']}; {first['envs_per_runner']} environments per runner, "
            f"{first['batch']} steps per iteration\n\n" + markdown_table(head, body))


def runners_arg(text: str):
    if text == "auto":
        return text
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0 or auto")
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["RepeatPreviousEasy"],
                        help=f"of {', '.join(TASKS)}, or module:Class")
    parser.add_argument("--modules", nargs="+", choices=MODULES, default=["txl"])
    parser.add_argument("--runners", type=runners_arg, nargs="+", default=[2],
                        help="env runners per run, or auto: as many as the cluster's CPUs hold")
    parser.add_argument("--envs-per-runner", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--minutes", type=float, default=float("inf"), help="stop a run after this many minutes")
    parser.add_argument("--batch", type=int, default=4096, help="environment steps per iteration")
    parser.add_argument("--seeds", type=int, default=1, help="runs seeds 1..N")
    parser.add_argument("--play", action="store_true", help="save, restore and play each txl run (docstring)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines, one finished run a line")
    parser.add_argument("--table", type=Path, default=None, help="print the table of this file and stop")
    parser.add_argument("--address", default="", help="join a running Ray cluster (auto: the one on this node) "
                        "instead of starting a local one")
    args = parser.parse_args(argv)
    if args.table:
        print(table(jsonl_rows(args.table)))
        return
    done = jsonl_rows(args.out) if args.out and args.out.exists() else []
    have = {(r["task"], r["module"], r["runners"], r["seed"], r["budget"]) for r in done}
    rows = []
    for task, module, runners, seed in itertools.product(args.tasks, args.modules, args.runners,
                                                         range(1, args.seeds + 1)):
        if (task, module, runners, seed, args.steps) in have:
            continue
        row = {**run(args, task, module, runners, seed), "budget": args.steps}
        rows.append(row)
        if args.out:
            with args.out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    print(table(done + rows) if done or rows else "nothing ran")


if __name__ == "__main__":
    main()
