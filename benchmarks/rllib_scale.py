"""Scaling out with RLlib: the same POPGym task learnt by RLlib's PPO with ``TransformerXLRLModule`` on 1, 2 and 4
environment runners of a local Ray, with environment steps per second and the mean return at equal steps.

Each configuration starts its own local Ray (``ray.init``; the CPUs it is told of are at least the runners + 1, so
4 runners are scheduled on a 2-core machine too: there they share the cores), or joins a running cluster with
``--address``, and trains ``--steps`` environment steps in iterations of ``--batch`` steps, with the learner in
this process. ``--module lstm`` and ``--module default`` run RLlib's own LSTM (``model_config={"use_lstm": True,
"max_seq_len": 20}``) and its memoryless default module instead, with the Discrete observation one-hot through
RLlib's ``FlattenObservations`` connector (its default encoders take no Discrete observation). Prints a markdown
table with the Ray version and the CPU named, and with ``--json`` one JSON object per configuration::

    python benchmarks/rllib_scale.py                               # 1, 2, 4 runners, 200k steps each
    python benchmarks/rllib_scale.py --runners 1 2 --steps 20000   # a short look
    python benchmarks/rllib_scale.py --module lstm --runners 2 --steps 1000000
    python benchmarks/rllib_scale.py --address auto --runners 32     # on a node of a running cluster

On one machine ``txl rl`` steps faster (no actors, no serialisation of every step's state, the decoding cache):
docs/RL.md, "RLlib". RLlib pays where the environments are spread over the machines of a cluster
(docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

ENV_NAME = "rllib-scale-task"
TASKS = {
    "RepeatPreviousEasy": "popgym.envs.repeat_previous:RepeatPreviousEasy",
    "RepeatFirstEasy": "popgym.envs.repeat_first:RepeatFirstEasy",
    "PositionOnlyCartPoleEasy": "popgym.envs.position_only_cartpole:PositionOnlyCartPoleEasy",
}


def env_class(task: str):
    module, _, name = TASKS.get(task, task).partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def config_for(args, runners: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.tune.registry import register_env

    from transformer_xl.rllib import TransformerXLRLModule

    task = env_class(args.task)
    register_env(ENV_NAME, lambda env_config: task())  # POPGym's classes take no arguments; RLlib passes one
    config = (PPOConfig()
              .environment(ENV_NAME)
              .env_runners(num_env_runners=runners, num_envs_per_env_runner=args.envs_per_runner)
              .learners(num_learners=0)
              .debugging(seed=args.seed))
    if args.module == "txl":
        env_id = f"popgym-{args.task}-v0"
        config = config.rl_module(rl_module_spec=RLModuleSpec(module_class=TransformerXLRLModule,
                                                              model_config=TransformerXLRLModule.model_config_for(
                                                                  env_id)))
        training = TransformerXLRLModule.ppo_training(env_id)
    else:
        config = config.env_runners(env_to_module_connector=lambda env, spaces, device: FlattenObservations())
        # a dict leaves out DefaultModelConfig's max_seq_len (20), which a stateful module must have
        config = config.rl_module(model_config={"use_lstm": True, "max_seq_len": 20} if args.module == "lstm" else {})
        training = {}
    return config.training(**{**training, "train_batch_size_per_learner": args.batch})


def run(args, runners: int) -> dict:
    import ray
    from ray.rllib.utils.metrics import (
        ENV_RUNNER_RESULTS,
        ENV_RUNNER_SAMPLING_TIMER,
        EPISODE_RETURN_MEAN,
        LEARNER_UPDATE_TIMER,
        NUM_ENV_STEPS_SAMPLED_LIFETIME,
        TIMERS,
    )

    if args.address:  # a running cluster (ray start; ray job submit): its nodes' CPUs
        ray.init(address=args.address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(os.cpu_count() or 1, runners + 1), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    try:
        algo = config_for(args, runners).build_algo()
        start, steps, curve, sampling, learning = time.perf_counter(), 0, [], 0.0, 0.0
        while steps < args.steps:
            result = algo.train()
            steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
            curve.append((steps, float(result[ENV_RUNNER_RESULTS].get(EPISODE_RETURN_MEAN, float("nan")))))
            timers = result.get(TIMERS, {})  # RLlib's means over its recent iterations, per iteration
            sampling += float(timers.get(ENV_RUNNER_SAMPLING_TIMER, 0.0))
            learning += float(timers.get(LEARNER_UPDATE_TIMER, 0.0))
        seconds = time.perf_counter() - start
        algo.stop()
    finally:
        ray.shutdown()
    return {"module": args.module, "task": args.task, "runners": runners, "steps": steps, "seconds": seconds,
            "steps_per_s": steps / seconds, "mean_return": curve[-1][1], "sampling_s": sampling,
            "learning_s": learning, "curve": curve}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="RepeatPreviousEasy", help=f"one of {', '.join(TASKS)} or module:Class")
    parser.add_argument("--module", choices=("txl", "lstm", "default"), default="txl")
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--envs-per-runner", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=4096, help="environment steps per iteration")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="one JSON object per configuration as well")
    parser.add_argument("--address", default="", help="join a running Ray cluster (auto: the one on this node) "
                        "instead of starting a local one")
    args = parser.parse_args(argv)
    import ray

    rows = []
    for runners in args.runners:
        row = run(args, runners)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    print(f"\nRay {ray.__version__}, {cpu_name()}, {os.cpu_count()} CPUs; {args.task}, module {args.module}, "
          f"{args.envs_per_runner} environments per runner, {args.batch} steps per iteration\n")
    print("| runners | steps | seconds (sampling, learning) | steps/s | mean return at the end |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['runners']} | {row['steps']} | {row['seconds']:.0f} ({row['sampling_s']:.0f}, "
              f"{row['learning_s']:.0f}) | {row['steps_per_s']:,.0f} | {row['mean_return']:.2f} |")


if __name__ == "__main__":
    main()
