"""transformer_xl.rllib on a Ray cluster of two nodes on this machine (Ray's own ``ray.cluster_utils.Cluster``): a
head of 1 CPU and a worker node of 2 CPUs that alone offers the resource the env runners ask for, so every runner
runs on the worker node. RLlib's PPO with the module learns there; the checkpoint's module restores in a fresh
process with no Ray and its agent plays under ``txl rl-eval``; a cluster too small for the config is one line.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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
SMALL = {"d_model": 16, "n_layer": 1, "n_head": 2, "d_head": 8, "d_inner": 32, "mem_len": 8, "max_seq_len": 8}


@pytest.fixture(scope="module")
def two_nodes():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # a head port of its own: another Ray of these tests may run on this machine at the same time
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False,
                                                            "gcs_server_port": free_port()})
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
