"""The evaluation loop with memory (evaluation/segments.py, evaluation/evaluate.py) against a loop written out here:
the data cut into rows, segments of tgt_len read in order with the memory carried, every prediction counted once."""

from __future__ import annotations

import math
import time

import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.errors import ConfigError
from transformer_xl.evaluation import EvalSettings, evaluate
from transformer_xl.evaluation.segments import (
    carries_projections,
    losses_with_memory,
    outputs_with_memory,
    row_segments,
)
from transformer_xl.model import RunLengths


def by_hand(model, data, batch, lengths: RunLengths, steps=None, rows=None):
    """Summed loss and count of the predictions of ``data`` read as ``batch`` contiguous rows (``rows``: only these),
    segment by segment with the memory carried."""
    x = torch.as_tensor(data[: len(data) // batch * batch]).view(batch, -1)
    if rows is not None:
        x = x[rows]
    inputs, labels = x[:, :-1], x[:, 1:]
    total, count, mems = 0.0, 0, None
    with torch.no_grad(), model.inference(**lengths.to_dict()):
        for k, s in enumerate(range(0, inputs.size(1), lengths.tgt_len)):
            if steps is not None and k == steps:
                break
            out = model(inputs[:, s:s + lengths.tgt_len], labels=labels[:, s:s + lengths.tgt_len], mems=mems)
            mems = out.mems
            total += float(out.losses.double().sum())
            count += out.losses.numel()
    return total, count


@pytest.mark.parametrize("lengths, steps", [(RunLengths(4, 0, 6), None), (RunLengths(3, 0, 8, 2, True), None),
                                            (RunLengths(5, 0, 0), 3), (RunLengths(4, 0, 3), 2)])
def test_evaluate_is_the_loop_with_memory(lengths, steps):
    model = tiny_model(seed=1, tgt_len=2, mem_len=2).train()
    data = random_tokens(3 * 23, seed=1).numpy()
    before = model.lengths
    began = time.perf_counter()
    result = evaluate(model, data, EvalSettings(batch_size=3, lengths=lengths, max_steps=steps, level="word"))
    wall = time.perf_counter() - began
    total, count = by_hand(model, data, 3, lengths, steps)
    assert result.tokens == count and result.loss == pytest.approx(total / count, rel=1e-6)
    assert result.metric == "ppl" and result.value == pytest.approx(math.exp(result.loss), rel=1e-12)
    assert 0 < result.seconds <= wall and result.tokens_per_s == pytest.approx(count / result.seconds)
    assert result.to_dict()["tokens_per_s"] == result.tokens_per_s and result.to_dict()["loss"] == result.loss
    assert model.lengths == before and model.training  # the model's own lengths and mode are back
    assert evaluate(model, data, batch_size=3, lengths=lengths, max_steps=steps).loss == result.loss  # as fields


def test_evaluate_reads_its_model_lengths_and_names_bits_per_character():
    model = tiny_model(seed=2, tgt_len=3, mem_len=5, clamp_len=2)
    data = random_tokens(2 * 20, seed=2).numpy()
    result = evaluate(model, data, batch_size=2, level="char")
    total, count = by_hand(model, data, 2, model.lengths)
    assert result.loss == pytest.approx(total / count, rel=1e-6) and result.tokens == count
    assert result.metric == "bpc" and result.value == pytest.approx(result.loss / math.log(2), rel=1e-12)


def test_one_ranks_share_without_a_process_group():
    """world_size 2: rank 1 reads rows 2 and 3 of 4 (no process group here: nothing to add from rank 0)."""
    model = tiny_model(seed=3, tgt_len=4, mem_len=4)
    data = random_tokens(4 * 15, seed=3).numpy()
    result = evaluate(model, data, EvalSettings(batch_size=4, rank=1, world_size=2))
    total, count = by_hand(model, data, 4, model.lengths, rows=[2, 3])
    assert result.tokens == count and result.loss == pytest.approx(total / count, rel=1e-6)


def test_autocast_is_used_when_asked_for():
    model = tiny_model(seed=4, tgt_len=4, mem_len=4)
    data = random_tokens(2 * 30, seed=4).numpy()
    plain = evaluate(model, data, batch_size=2)
    bf16 = evaluate(model, data, batch_size=2, autocast_dtype=torch.bfloat16)
    assert bf16.tokens == plain.tokens and bf16.loss != plain.loss
    assert bf16.loss == pytest.approx(plain.loss, rel=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        total, count = by_hand(model, data, 2, model.lengths)  # the same loop, all of it under autocast
    assert bf16.tokens == count and bf16.loss == pytest.approx(total / count, rel=1e-4)


def test_a_single_prediction_is_its_own_loss():
    """Two tokens, one row: the loss is that of the one prediction, -log p(second | first)."""
    model = tiny_model(seed=9)
    data = random_tokens(2, seed=9).numpy()
    result = evaluate(model, data, batch_size=1)
    with torch.no_grad():
        log_probs = model(torch.as_tensor(data[:1])[None], return_log_probs=True).log_probs  # [1, 1, V]
        expected = -float(torch.log_softmax(log_probs[0, 0].double(), -1)[int(data[1])])
    assert result.tokens == 1 and result.loss == pytest.approx(expected, rel=1e-5)


def test_bad_settings_are_one_config_error():
    model = tiny_model(seed=5)
    data = random_tokens(60, seed=5).numpy()
    with pytest.raises(ConfigError, match="give EvalSettings or its fields, not both"):
        evaluate(model, data, EvalSettings(), batch_size=2)
    with pytest.raises(ConfigError, match="mode: must be 'segment' or 'sliding', got 'nope'"):
        evaluate(model, data, mode="nope")


@pytest.mark.parametrize("memory", ["projections", "states"])
def test_rows_that_end_leave_the_batch_and_the_rest_keep_their_memory(memory):
    """Segments of 3 rows, then 2, then 1: each row's outputs are those of reading it alone, and those of the loop
    written out here (the memory of states carried, its first rows going on). ``states``: a model in training mode
    (dropout off) carries the memory of states (carries_projections)."""
    model = tiny_model(seed=6, tgt_len=3, mem_len=5 if memory == "projections" else 2)
    model.train(memory == "states")
    assert carries_projections(model) == (memory == "projections")
    x = random_tokens(3, 10, seed=6)
    segments = [(x[:3, 0:3], x[:3, 1:4]), (x[:2, 3:6], x[:2, 4:7]), (x[:1, 6:9], x[:1, 7:10])]
    with torch.no_grad():
        together = list(losses_with_memory(model, segments))
        mems = None
        for (inp, tgt), got in zip(segments, together):
            out = model(inp, tgt, mems=None if mems is None else [m[:inp.size(0)] for m in mems])
            mems = out.mems
            torch.testing.assert_close(got, out.losses, rtol=1e-5, atol=1e-5)
        for row in range(3):
            alone = list(losses_with_memory(model, [(i[row:row + 1], t[row:row + 1]) for i, t in segments
                                                    if i.size(0) > row]))
            for a, b in zip(alone, together):
                torch.testing.assert_close(a[0], b[row], rtol=1e-5, atol=1e-5)
        start = model(x[:, :2]).mems  # a memory to start from
        carried = [out.losses for out in outputs_with_memory(model, segments[:1], mems=start)]
        assert torch.equal(carried[0], model(*segments[0], mems=start).losses)
        assert torch.equal(next(losses_with_memory(model, segments[:1], mems=start)), carried[0])
        assert not torch.equal(carried[0], together[0])


def test_the_memory_is_carried_as_projections_where_the_model_allows_it():
    """The rule of the module's docstring: attn_type 0, the plain back-end, no extended context, not training."""
    model = tiny_model(seed=7)
    assert carries_projections(model)
    assert not carries_projections(tiny_model(seed=7).train())
    assert not carries_projections(tiny_model(seed=7, ext_len=1))
    assert not carries_projections(tiny_model(seed=7, attn_type=2))
    model.set_attention("streamed", 2)
    assert not carries_projections(model)


@pytest.mark.parametrize("decoding", ["segment", "sliding"])
def test_projected_memory_reads_segments_whatever_generation_does(decoding):
    """The model's ``decoding`` (how generation moves the memory) leaves evaluation alone: the segments are those of
    the loop with the memory of states; a short segment can only be the last."""
    model = tiny_model(seed=8, tgt_len=3, mem_len=4, decoding=decoding)
    x = random_tokens(2, 10, seed=8)
    segments = [(x[:, s:s + 3], x[:, s + 1:s + 4]) for s in (0, 3, 6)]
    with torch.no_grad():
        mems = None
        for got, (inp, tgt) in zip(losses_with_memory(model, segments), segments):
            out = model(inp, tgt, mems=mems)
            mems = out.mems
            torch.testing.assert_close(got, out.losses, rtol=1e-5, atol=1e-5)
        short = [(x[:, :2], x[:, 1:3]), (x[:, 2:5], x[:, 3:6])]
        with pytest.raises(ValueError, match="only the last may be shorter"):
            list(losses_with_memory(model, short))


def test_row_segments():
    inputs, labels = torch.arange(20).view(2, 10), torch.arange(100, 120).view(2, 10)
    cut = list(row_segments(inputs, labels, 4))
    assert [i.tolist() for i, _ in cut] == [[[0, 1, 2, 3], [10, 11, 12, 13]], [[4, 5, 6, 7], [14, 15, 16, 17]],
                                            [[8, 9], [18, 19]]]
    assert [t[0, 0].item() for _, t in cut] == [100, 104, 108]
    assert [i.size(1) for i, _ in row_segments(inputs, labels, 4, limit=6)] == [4, 2]
    assert [i.size(1) for i, _ in row_segments(inputs, labels, 4, limit=30)] == [4, 4, 2]
    assert all(i.device.type == "cpu" for i, _ in row_segments(inputs, labels, 3, device="cpu"))
