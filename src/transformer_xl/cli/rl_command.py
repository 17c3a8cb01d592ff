"""``txl rl ENV_ID``: train a PPO agent with a Transformer-XL memory (GTrXL by default) on a Gymnasium environment."""

from __future__ import annotations

import json
import signal
import sys

from ..rl.ppo import PPOConfig
from ..rl.runner import RLSettings, train_agent
from ..training.signals import StopNow, exit_status
from .options import at_least, checks, positive

DEFAULTS = RLSettings(env_id="")


def add(sub) -> None:
    p = sub.add_parser("rl", allow_abbrev=False, help="train a PPO agent with a Transformer-XL memory on a Gymnasium "
                       "environment (needs the rl extra)",
                       description="Train a PPO agent whose policy and value read a Transformer-XL memory (GTrXL: "
                                   "gated, identity-map reordered) on any Gymnasium environment with discrete or box "
                                   "observations and discrete actions, e.g. popgym-RepeatFirstEasy-v0. The run "
                                   "directory holds run.yaml, metrics.jsonl, checkpoints/, agent/ and returns.png.",
                       epilog="Measured returns and the algorithm: docs/RL.md.")
    p.add_argument("env_id", metavar="ENV_ID", help="a Gymnasium id (popgym-... ids need popgym, in the rl extra)")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, default=DEFAULTS.steps, metavar="N",
                     help="environment steps in all (default: %(default)s)")
    run.add_argument("--seed", type=int, default=DEFAULTS.seed, metavar="N",
                     help="seed of the agent and the environments (default: %(default)s)")
    run.add_argument("--run-dir", default=DEFAULTS.run_dir, metavar="DIR",
                     help="where checkpoints, metrics.jsonl, the agent and returns.png go (default: %(default)s)")
    run.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    run.add_argument("--threads", type=int, default=DEFAULTS.threads, metavar="N",
                     help="torch CPU threads (default: %(default)s, the fastest for small models stepped one "
                          "observation at a time)")
    run.add_argument("--json", action="store_true", help="print one JSON object at the end (env, steps, seconds, "
                     "mean_return of the last 100 episodes, episodes, run_dir)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    agent = p.add_argument_group("agent")
    agent.add_argument("--mem-len", type=int, default=64, metavar="N",
                       help="steps of its episode each step sees before it (0: no memory; default: %(default)s)")
    agent.add_argument("--gating", choices=("gru", "none"), default="gru",
                       help="gru: GTrXL's GRU-type gates; none: Transformer-XL with pre-LN residuals (default: "
                            "%(default)s)")
    agent.add_argument("--core", choices=("trxl", "gru"), default="trxl",
                       help="the memory: trxl (Transformer-XL) or gru (a GRU of the same width, the recurrent "
                            "baseline; default: %(default)s)")
    agent.add_argument("--d-model", type=int, default=64, metavar="N",
                       help="width of the memory's states; 4 heads of 16 attend over them (default: %(default)s)")
    agent.add_argument("--n-layer", type=int, default=2, metavar="N",
                       help="layers of the memory (default: %(default)s)")
    agent.add_argument("--window", type=int, default=16, metavar="N",
                       help="steps per replayed window in the update (default: %(default)s)")
    _add_ppo_options(p)
    p.set_defaults(func=run_rl, **checks(at_least("--steps", 1), at_least("--mem-len", 0), at_least("--envs", 1),
                                         at_least("--threads", 1), at_least("--d-model", 1), at_least("--n-layer", 1),
                                         at_least("--window", 1), at_least("--rollout", 1), positive("--lr"),
                                         at_least("--epochs", 1), at_least("--minibatches", 1),
                                         at_least("--ent-coef", 0), ("--gamma", 0, 1, False)))



def _add_ppo_options(p) -> None:
    """The optimisation group: PPO's rollout and update (defaults: :class:`PPOConfig`)."""
    opt = p.add_argument_group("optimisation (PPO)")
    ppo_defaults = PPOConfig()
    opt.add_argument("--envs", type=int, default=ppo_defaults.envs, metavar="N",
                     help="environments stepped together (default: %(default)s)")
    opt.add_argument("--rollout", type=int, default=ppo_defaults.rollout, metavar="N",
                     help="steps per environment per iteration (default: %(default)s)")
    opt.add_argument("--lr", type=float, default=ppo_defaults.lr, metavar="LR",
                     help="learning rate, annealed to 0 (default: %(default)s)")
    opt.add_argument("--epochs", type=int, default=ppo_defaults.epochs, metavar="N",
                     help="passes over each iteration's data (default: %(default)s)")
    opt.add_argument("--minibatches", type=int, default=ppo_defaults.minibatches, metavar="N",
                     help="minibatches per pass (default: %(default)s)")
    opt.add_argument("--ent-coef", type=float, default=ppo_defaults.ent_coef, metavar="C",
                     help="weight of the entropy bonus (default: %(default)s)")
    opt.add_argument("--gamma", type=float, default=ppo_defaults.gamma, metavar="G",
                     help="discount (default: %(default)s)")

def settings_of(args) -> RLSettings:
    """The typed settings of the command line."""
    ppo = PPOConfig(envs=args.envs, rollout=args.rollout, lr=args.lr, epochs=args.epochs,
                    minibatches=args.minibatches, ent_coef=args.ent_coef, gamma=args.gamma)
    agent = dict(mem_len=args.mem_len, gating=args.gating, core=args.core, d_model=args.d_model,
                 n_layer=args.n_layer, window=args.window)
    return RLSettings(env_id=args.env_id, steps=args.steps, seed=args.seed, run_dir=args.run_dir, resume=args.resume,
                      threads=args.threads, progress=not args.no_progress, agent=agent, ppo=ppo)


def run_rl(args) -> int:
    settings = settings_of(args)
    try:
        result = train_agent(settings)
    except StopNow as stop:
        print(f"txl rl: stopped at once by a second {stop.name}; the last checkpoint is intact (continue with: "
              f"txl rl {settings.env_id} --resume --run-dir {settings.run_dir})", file=sys.stderr)
        return exit_status(stop.signum)
    if args.json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        shown = "n/a" if result.mean_return is None else f"{result.mean_return:.3f}"
        print(f"done: {result.steps} steps in {result.seconds:.0f} s, mean return {shown} (last 100 of "
              f"{result.episodes} episodes); agent in {result.run_dir}/agent")
    if result.stopped_by != "steps":
        print(f"interrupted by {result.stopped_by} at step {result.steps}: checkpoint written; continue with: "
              f"txl rl {settings.env_id} --resume --run-dir {settings.run_dir}", file=sys.stderr)
        return exit_status(getattr(signal, result.stopped_by))
    return 0
