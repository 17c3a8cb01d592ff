"""No gradient enters the memory; every parameter used receives one."""

import pytest
import torch
from helpers import random_tokens, tiny_model


@pytest.mark.parametrize("attn_type", [0, 1, 2, 3])
def test_memory_is_detached_and_gradient_stops_there(attn_type):
    model = tiny_model(attn_type=attn_type, tgt_len=4, mem_len=4).train()
    x = random_tokens(2, 9)
    first = model(x[:, :4], x[:, 1:5], output_hidden_states=True)
    assert all(not m.requires_grad and m.grad_fn is None for m in first.mems)
    # Segment 1's states did require grad; none of segment 2's loss may flow back into them.
    assert first.all_hidden_states[0].requires_grad
    second = model(x[:, 4:8], x[:, 5:9], mems=first.mems)
    grads = torch.autograd.grad(second.loss, first.all_hidden_states, allow_unused=True)
    assert all(g is None for g in grads)


def test_gradient_through_memory_equals_gradient_with_constant_memory():
    model = tiny_model(tgt_len=4, mem_len=4)
    x = random_tokens(2, 9)
    first = model(x[:, :4], x[:, 1:5])
    model.zero_grad()
    model(x[:, 4:8], x[:, 5:9], mems=first.mems).loss.backward()
    g1 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    frozen = [m.detach().clone() for m in first.mems]  # constant whatever first.mems carries
    model(x[:, 4:8], x[:, 5:9], mems=frozen).loss.backward()
    for a, b in zip(g1, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("attn_type,untie_r", [(0, False), (0, True), (1, False), (2, False), (3, False)])
@pytest.mark.parametrize("div_val,cutoffs,tie_weight", [(1, [], True), (2, [20, 40], True), (1, [20, 40], False)])
def test_every_parameter_receives_gradient(attn_type, untie_r, div_val, cutoffs, tie_weight):
    d_embed = 16 if div_val == 1 else 32
    model = tiny_model(attn_type=attn_type, untie_r=untie_r, div_val=div_val, cutoffs=cutoffs, d_embed=d_embed,
                       tie_weight=tie_weight, tie_projs=[False, True, False][: len(cutoffs) + 1], tgt_len=6,
                       mem_len=6, clamp_len=-1)
    model.train()
    tokens = torch.arange(0, 60).view(5, 12) % 60  # every vocabulary cluster appears, as inputs and targets
    labels = torch.roll(tokens, -7)
    out = model(tokens[:, :6], labels[:, :6])
    out = model(tokens[:, 6:], labels[:, 6:], mems=out.mems)  # memory in use: all position entries matter
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} received no gradient"
        assert p.grad.abs().sum() > 0, f"{name} received an all-zero gradient"


@pytest.mark.parametrize("pre_lnorm", [False, True])
def test_memory_rows_take_no_gradient_of_their_own_and_give_the_same_weights_gradients(pre_lnorm):
    """Keys and values of stop-gradient memory rows are projected apart (pre-LN: the layer norm's scale and shift
    folded into the weight): the same keys, values and gradients of the weights, the layer norm and the segment
    as projecting memory and segment together, with less arithmetic in the backward (no product gives the
    memory rows a gradient)."""
    from torch.utils.flop_counter import FlopCounterMode

    from transformer_xl.model.attention.layers import RelativeAttention

    torch.manual_seed(0)
    attn = RelativeAttention(2, 16, 8, 0.0, 0.0, pre_lnorm)
    with torch.no_grad():
        attn.layer_norm.weight.uniform_(0.5, 1.5)
        attn.layer_norm.bias.uniform_(-0.5, 0.5)
    h, mems = torch.randn(3, 4, 16, requires_grad=True), torch.randn(3, 12, 16)
    weights = torch.randn(3, 2, 16, 8)  # a fixed mix of q, k and v [B, H, K, D] as the loss

    def project(memory):
        attn.zero_grad()
        h.grad = None
        with FlopCounterMode(display=False) as flops:
            q, k, v = attn.project(h, memory)
            (q.sum() + (k * weights).sum() + (v * weights.flip(0)).sum()).backward()
        grads = [p.grad.clone() for p in (attn.qkv_net.weight, attn.layer_norm.weight, attn.layer_norm.bias)
                 if p.grad is not None]
        return (q, k, v), grads + [h.grad.clone()], flops.get_total_flops()

    apart, apart_grads, apart_flops = project(mems)  # a stop-gradient memory: projected apart
    joint, joint_grads, joint_flops = project(mems.clone().requires_grad_())  # memory that takes a gradient
    for a, b in zip(apart + tuple(apart_grads), joint + tuple(joint_grads)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert len(apart_grads) == len(joint_grads) == (4 if pre_lnorm else 2)
    assert apart_flops <= joint_flops - 2 * 3 * 12 * 32 * 16  # less the product that gives the memory rows a gradient
