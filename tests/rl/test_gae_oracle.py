"""GAE against TorchRL's ``generalized_advantage_estimate`` (code no one here wrote), episode ends included."""

import pytest
import torch

from transformer_xl.rl.ppo import Batch, advantages


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 1.0), (1.0, 0.0)])
def test_advantages_equal_torchrl(gamma, lam):
    functional = pytest.importorskip("torchrl.objectives.value.functional", reason="TorchRL is the oracle (dev extra)")
    steps, envs = 64, 8
    gen = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(steps, envs, generator=gen), torch.randn(steps, envs, generator=gen)
    last, dones = torch.randn(envs, generator=gen), torch.rand(steps, envs, generator=gen) < 0.1
    assert dones.any()
    batch = Batch(None, None, None, None, values, rewards, dones, [], last)
    advantages(batch, gamma, lam)
    next_values = torch.cat([values[1:], last[None]])
    adv, target = functional.generalized_advantage_estimate(gamma, lam, values[..., None], next_values[..., None],
                                                           rewards[..., None], dones[..., None], time_dim=0)
    torch.testing.assert_close(batch.advantages, adv[..., 0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(batch.returns, target[..., 0], rtol=1e-6, atol=1e-6)
