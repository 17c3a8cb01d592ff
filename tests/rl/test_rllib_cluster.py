"""transformer_xl.rllib on a Ray cluster of two nodes on this machine (Ray's own ``ray.cluster_utils.Cluster``): a
head of 1 CPU and a worker node of 2 CPUs that alone offers the resource the env runners ask for, so every runner
runs on the worker node. RLlib's PPO with the module learns there; the checkpoint's module restores in a fresh
process with no Ray and its agent plays under ``txl rl-eval``; a cluster too small for the config is one line;
a worker node lost mid-run has its runners restarted on the node that replaces it. And first, DISTRIBUTED.md's
``ray start`` / ``ray job submit`` commands as written, on a cluster of their own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray", reason="RLlib is the rllib extra")
pytest.importorskip("ray.rllib", reason="RLlib is the rllib extra")
pytest.importorskip("popgym", reason="POPGym's tasks come with the rllib extra")

from ray.cluster_utils import Cluster  # noqa: E402  (after the skip)
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.core import DEFAULT_MODULE_ID  # noqa: E402
from ray.rllib.core.rl_module.rl_module import RLModuleSpec  # noqa: E402

from transformer_xl.errors import ConfigError  # noqa: E402
from transformer_xl.rllib import TransformerXLRLModule  # noqa: E402

TASK = "popgym-RepeatPreviousEasy-v0"
REPO = Path(__file__).resolve().parents[2]
DEATH_DETECTION = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                   "health_check_failure_threshold": 2}
SMALL = {"d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32, "mem_len": 8, "max_seq_len": 8}


@pytest.fixture(scope="module")
def two_nodes():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # a head port of its own: another Ray of these tests may run on this machine at the same time
    # a lost node is marked dead after 2 missed health checks 1 s apart (Ray's default: 5 checks 3 s apart)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "gcs_server_port": free_port(),
                                                            "_system_config": DEATH_DETECTION})
    worker = cluster.add_node(num_cpus=2, resources={"runner_node": 2})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()
    torch.set_num_threads(threads)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(runners: int, evaluation: int = 0):
    return (PPOConfig()
            .environment(TASK)
            .env_runners(num_env_runners=runners, num_envs_per_env_runner=2, rollout_fragment_length=64,
                         custom_resources_per_env_runner={"runner_node": 1})
            .evaluation(evaluation_num_env_runners=evaluation)
            .learners(num_learners=0)
            .rl_module(rl_module_spec=RLModuleSpec(module_class=TransformerXLRLModule, model_config=SMALL))
            .training(**{**TransformerXLRLModule.ppo_training(TASK), "train_batch_size_per_learner": 256,
                         "minibatch_size": 64, "num_epochs": 1})
            .debugging(seed=0))


def documented_cluster_commands() -> list:
    """The commands of DISTRIBUTED.md's "On a cluster" block after its install line, each ``ray ...`` line with
    the ``export`` lines before it (a line ending in ``\\`` joined to the next)."""
    text = (REPO / "docs" / "DISTRIBUTED.md").read_text(encoding="utf-8")
    section = text[text.index("### On a cluster"):]
    block = section[section.index("```bash\n") + len("```bash\n"):]
    block = block[:block.index("```")].replace("\\\n", " ")
    lines = [" ".join(line.split()) for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0].startswith("pip install"), lines[0]
    exports, commands = [], []
    for line in lines[1:]:
        if line.startswith("export "):
            exports.append(line)
        else:
            commands.append("; ".join([*exports, line]))
    return commands


@pytest.mark.skipif(importlib.util.find_spec("ray.dashboard.modules.job") is None or
                    importlib.util.find_spec("aiohttp") is None, reason="ray job submit needs ray[default]")
def test_the_documented_cluster_commands_run_as_written(tmp_path):
    """DISTRIBUTED.md's commands on this machine: a head (1 CPU) and a worker node (2 CPUs) started by
    ``ray start``, the benchmark submitted with ``ray job submit`` (HEAD_HOST is this machine, the ports free
    ones, ``--steps`` one iteration). First in the file: no other Ray of this module runs beside it."""
    head, worker, job = documented_cluster_commands()
    assert head.startswith("ray start --head --port=6379") and worker.endswith("ray start --address=HEAD_HOST:6379")
    assert " ray job submit --address http://HEAD_HOST:8265 --working-dir . -- python benchmarks/rllib_scale.py " \
           "--address auto --runners auto --steps " in job
    port, dashboard = free_port(), free_port()
    def typed(command: str) -> str:
        return (command.replace("HEAD_HOST", "127.0.0.1").replace("6379", str(port)).replace("8265", str(dashboard))
                .replace("--dashboard-host=0.0.0.0", f"--dashboard-host=127.0.0.1 --dashboard-port={dashboard}"))
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
           "OMP_NUM_THREADS": "1", "RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_AUTH_MODE", None)  # as a user's shell has it: what the block exports, it exports
    sessions, stack = [], contextlib.ExitStack()
    try:
        # each node's files apart, as on a machine of its own (else both unpack the job's --working-dir into one
        # folder, and one deletes it under the other), and none in /tmp/ray: a head killed there leaves its address
        # in /tmp/ray/ray_current_cluster, where a later ray.init() of this machine would try to join it
        # Each node's dashboard agent on free ports too: its default listen port (52365) is taken by the agent of
        # another Ray on this machine (tests/rl/test_rllib.py's, in the other test process), and then no agent
        # takes the job ("No available agent to submit job").
        own = [f"--temp-dir {stack.enter_context(tempfile.TemporaryDirectory(prefix=p, dir='/tmp'))} "
               f"--dashboard-agent-listen-port={free_port()} --dashboard-agent-grpc-port={free_port()}"
               for p in ("rh", "rw")]  # short paths for Ray's sockets
        for command, cpus, extra in ((head, 1, own[0]), (worker, 2, own[1])):
            log = tmp_path / f"node{len(sessions)}.log"
            with log.open("w") as out:  # its own process group: killed with everything it started below
                started = subprocess.Popen(["bash", "-c", f"{typed(command)} --num-cpus {cpus} {extra} --block"],
                                           env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            sessions.append(started)
            wait_for_nodes(port, len(sessions), started, log)
        submitted = typed(job).rsplit("--steps", 1)[0] + "--steps 512 --batch 512 --envs-per-runner 2"
        done = subprocess.run(["bash", "-c", submitted], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert "succeeded" in done.stdout + done.stderr
        row = next(line for line in done.stdout.splitlines() if line.startswith("| RepeatPreviousEasy"))
        assert "| txl | 1 |" in row  # auto: 3 CPUs less the evaluation runner and the driver
    finally:
        for started in sessions[::-1]:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started.pid, signal.SIGKILL)
            started.wait(timeout=60)
        stack.close()


def wait_for_nodes(port: int, nodes: int, started: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    """Until the cluster at ``port`` has ``nodes`` live nodes (``ray.nodes()`` in a child, not to join here), asked
    once ``ray start`` has said "Ray runtime started." (a probe costs a Ray driver's start)."""
    probe = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False); "
             "print(sum(n['Alive'] for n in ray.nodes()))")  # the cluster's token: RAY_AUTH_MODE=token below
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert started.poll() is None, log.read_text()[-3000:]
        if "Ray runtime started." not in log.read_text(errors="replace"):
            time.sleep(0.2)
            continue
        out = subprocess.run([sys.executable, "-c", probe, f"127.0.0.1:{port}"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "token"})
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(nodes)]:
            return
        time.sleep(1)
    raise AssertionError(f"the cluster did not reach {nodes} nodes in {seconds:.0f} s:\n{log.read_text()[-3000:]}")


def test_a_cluster_too_small_for_the_config_is_one_line_and_auto_fills_it(two_nodes):
    with pytest.raises(ConfigError) as told:
        TransformerXLRLModule.check_cluster(config(runners=2, evaluation=1))
    assert str(told.value) == ("needs 4 CPUs for 2 env runners + 1 evaluation runner + the driver; the cluster has 3 "
                               "(fewer --runners, or a bigger cluster)")
    assert TransformerXLRLModule.runners_that_fit(config(runners=1)) == 2
    TransformerXLRLModule.check_cluster(config(runners=2))  # fits: nothing said


def test_ppo_learns_with_the_runners_on_the_worker_node_and_its_checkpoint_plays_without_the_cluster(
        two_nodes, tmp_path):
    cluster, worker = two_nodes
    algo = config(runners=2).build_algo()
    try:
        nodes = algo.env_runner_group.foreach_env_runner(lambda runner: ray.get_runtime_context().get_node_id(),
                                                         local_env_runner=False)
        assert len(nodes) == 2 and set(nodes) == {worker.node_id}  # both runners on the worker node
        module = algo.learner_group._learner.module[DEFAULT_MODULE_ID]
        before = {k: v.clone() for k, v in module.state_dict().items()}
        result = algo.train()
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 256
        assert result["env_runners"]["num_episodes"] >= 2  # the runners stepped whole episodes with the memory
        after = module.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before)  # the learner updated the module
        path = algo.save_to_path(str(tmp_path / "ckpt"))
        probe = np.array([0, 1, 2, 3, 1, 1])  # a fixed episode's greedy actions, to compare after restoring
        expected = greedy(module, probe)
    finally:
        algo.stop()
    code = ("import json, sys\nfrom pathlib import Path\nimport numpy as np\n"
            "from ray.rllib.core import DEFAULT_MODULE_ID\n"
            "from ray.rllib.core.rl_module.rl_module import RLModule\n"
            "sys.path.insert(0, sys.argv[3])\nfrom test_rllib_cluster import greedy\n"
            "module = RLModule.from_checkpoint(Path(sys.argv[1]) / 'learner_group' / 'learner' / 'rl_module' /\n"
            "                                  DEFAULT_MODULE_ID)  # no Ray, no cluster: the files alone\n"
            "module.save_agent(sys.argv[2], 'popgym-RepeatPreviousEasy-v0')\n"
            "print(json.dumps(greedy(module, np.array([0, 1, 2, 3, 1, 1])).tolist()))\n")
    done = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "agent"), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected.tolist()
    played = subprocess.run([sys.executable, "-m", "transformer_xl", "rl-eval", str(tmp_path / "agent"), "--episodes",
                             "2", "--envs", "2", "--json"], capture_output=True, text=True, timeout=300)
    assert played.returncode == 0, played.stderr
    result = json.loads(played.stdout.strip().splitlines()[-1])
    assert result["episodes"] == 2 and -1.0 <= result["mean_return"] <= 1.0


def greedy(module, observations: np.ndarray) -> np.ndarray:
    """The module's most likely action at each step of one episode of these Discrete(4) observations."""
    from ray.rllib.core.columns import Columns

    state = {k: torch.as_tensor(v)[None] for k, v in module.get_initial_state().items()}
    actions = []
    with torch.no_grad():
        for obs in observations:
            out = module.forward_inference({Columns.OBS: torch.as_tensor([[int(obs)]]), Columns.STATE_IN: state})
            actions.append(int(torch.as_tensor(out[Columns.ACTIONS]).reshape(-1)[0]))
            state = out[Columns.STATE_OUT]
    return np.array(actions)


def test_a_lost_worker_node_restarts_its_runners_on_another_and_the_run_goes_on(two_nodes):
    """Last in the file: the fixture's worker node is killed (its raylet and every process on it, no goodbye) and
    a new node offering the runners' resource joins; Ray restarts both runners there once it has marked the lost
    node dead, and RLlib samples from them again (iterations in between sample nothing, and say so)."""
    cluster, worker = two_nodes
    algo = config(runners=2).build_algo()  # RLlib's defaults: a failed runner is restarted
    try:
        steps = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"]
        cluster.remove_node(worker, allow_graceful=False)
        cluster.add_node(num_cpus=2, resources={"runner_node": 2})
        lost, empty, sampled, healthy = time.monotonic(), 0, 0, 0
        while time.monotonic() - lost < 180:  # the runners come back one by one: wait for both
            sampled = algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] - steps
            healthy = algo.env_runner_group.num_healthy_remote_workers()
            if sampled > 0 and healthy == 2:
                break
            empty += sampled == 0
        assert sampled >= 256, f"nothing sampled in {time.monotonic() - lost:.0f} s after the node was lost"
        assert empty >= 1  # the iteration right after the loss found no runner to sample from
        assert healthy == 2, f"{healthy} of 2 runners healthy {time.monotonic() - lost:.0f} s after the loss"
        nodes = algo.env_runner_group.foreach_env_runner(lambda runner: ray.get_runtime_context().get_node_id(),
                                                         local_env_runner=False)
        assert len(nodes) == 2 and worker.node_id not in nodes  # both live on the node that replaced it
        assert algo.train()["env_runners"]["num_env_steps_sampled_lifetime"] - steps >= sampled + 256  # and go on
    finally:
        algo.stop()
