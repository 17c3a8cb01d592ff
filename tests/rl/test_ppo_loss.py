"""PPO's policy loss against its papers' formulas, written out one sample at a time.

* Schulman et al. 2017, eq. 7: ``L = -mean(min(r A, clip(r, 1-e, 1+e) A))``, with ``A`` normalised over the
  minibatch.
* Dual-clip (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL", eq. 5): for ``A < 0`` the term
  is ``max(min(r A, clip(r) A), c A)``, so an action whose probability rose more than ``c`` times while its advantage
  is negative gives no gradient; for ``A >= 0`` it is the clipped term.
"""

from __future__ import annotations

import math

import pytest
import torch

from transformer_xl.errors import ConfigError
from transformer_xl.rl.ppo import PPOConfig, ppo_loss


def literal_policy_loss(log_ratio, adv, clip, dual_clip):
    """The papers' objective, one Python float at a time."""
    mean = sum(adv) / len(adv)
    std = math.sqrt(sum((a - mean) ** 2 for a in adv) / (len(adv) - 1))
    total = 0.0
    for lr, a in zip(log_ratio, adv):
        a = (a - mean) / (std + 1e-8)
        r = math.exp(lr)
        term = min(r * a, min(max(r, 1 - clip), 1 + clip) * a)
        if dual_clip and a < 0:
            term = max(term, dual_clip * a)
        total += term
    return -total / len(adv)


@pytest.mark.parametrize("dual_clip", [None, 3.0, 1.5])
def test_the_policy_loss_is_the_papers_and_dual_clip_stops_the_push_on_risen_rare_actions(dual_clip):
    log_ratio = [-2.0, -0.5, -0.1, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 0.05, -0.05, 1.5]  # ratios 0.14 .. 20
    adv = [0.3, -1.2, 0.8, -0.4, 1.1, -2.0, 0.5, -0.7, -1.5, 0.2, -0.1, 2.5]
    old = torch.full((len(adv),), -3.0, dtype=torch.float64)
    new = (old + torch.tensor(log_ratio, dtype=torch.float64)).requires_grad_(True)
    zero = torch.zeros(len(adv), dtype=torch.float64)
    cfg = PPOConfig(clip=0.2, dual_clip=dual_clip, vf_coef=0.0, ent_coef=0.0)
    loss, stats = ppo_loss(new, old, torch.tensor(adv, dtype=torch.float64), zero, zero, zero, cfg)
    assert abs(loss.item() - literal_policy_loss(log_ratio, adv, 0.2, dual_clip)) < 1e-12
    loss.backward()
    mean, std = sum(adv) / len(adv), torch.tensor(adv, dtype=torch.float64).std().item()
    for i, (lr, a) in enumerate(zip(log_ratio, adv)):
        a, r = (a - mean) / (std + 1e-8), math.exp(lr)
        clipped = (a > 0 and r > 1.2) or (a < 0 and r < 0.8)
        bounded = bool(dual_clip) and a < 0 and r > dual_clip
        expected = 0.0 if clipped or bounded else -r * a / len(adv)  # d(-r A / n) / d log r
        assert abs(new.grad[i].item() - expected) < 1e-12, (i, r, a, new.grad[i].item(), expected)
    assert any(math.exp(lr) > 3 and a < 0 for lr, a in zip(log_ratio, adv))  # the case dual-clip is for is there


@pytest.mark.parametrize("bad", [0.5, 1.0])
def test_a_dual_clip_of_one_or_less_is_one_line(bad):
    with pytest.raises(ConfigError, match=r"dual_clip: must be > 1 \(or 0: off\)"):
        PPOConfig(dual_clip=bad).check(16)


@pytest.mark.parametrize("dims", [None, [3, 2]])
def test_the_kl_penalty_is_the_whole_distributions_kl_written_out(dims):
    """``kl_from``: KL(old || new) = sum over every action of p_old (log p_old - log p_new) (per dimension, added,
    for MultiDiscrete); the loss adds ``kl_coef`` x its mean, and its gradient is ``kl_coef`` (p_new - p_old) / n."""
    from transformer_xl.rl.actions import CategoricalActions

    torch.manual_seed(0)
    old_logits, new_logits = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    new_logits.requires_grad_(True)
    kl = CategoricalActions(new_logits, dims).kl_from(CategoricalActions(old_logits, dims))
    for row in range(4):
        expected = 0.0
        for lo, hi in ([(0, 5)] if dims is None else [(0, 3), (3, 5)]):
            p, q = old_logits[row, lo:hi].softmax(-1).tolist(), new_logits[row, lo:hi].softmax(-1).tolist()
            expected += sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q))
        assert abs(kl[row].item() - expected) < 1e-12
    zero = torch.zeros(4, dtype=torch.float64)
    cfg = PPOConfig(clip=0.2, vf_coef=0.0, ent_coef=0.0, kl_coef=2.5)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    with_kl, stats = ppo_loss(zero, zero, adv, zero, zero, zero, cfg, kl)
    without, _ = ppo_loss(zero, zero, adv, zero, zero, zero, cfg)
    assert abs(with_kl.item() - without.item() - 2.5 * kl.mean().item()) < 1e-12 and "kl" in stats
    with_kl.backward()
    parts = [(0, 5)] if dims is None else [(0, 3), (3, 5)]
    expected = torch.cat([new_logits[:, lo:hi].softmax(-1) - old_logits[:, lo:hi].softmax(-1) for lo, hi in parts],
                         dim=-1) * 2.5 / 4
    torch.testing.assert_close(new_logits.grad, expected.detach(), rtol=0, atol=1e-12)
