"""The evaluation loop with memory (evaluation/segments.py, evaluation/evaluate.py) against a loop written out here:
the data cut into rows, segments of tgt_len read in order with the memory carried, every prediction counted once."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.errors import ConfigError
from transformer_xl.evaluation import EvalSettings, evaluate
from transformer_xl.evaluation.segments import losses_with_memory, outputs_with_memory, row_segments
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
    result = evaluate(model, data, EvalSettings(batch_size=3, lengths=lengths, max_steps=steps, level="word"))
    total, count = by_hand(model, data, 3, lengths, steps)
    assert result.tokens == count and result.loss == pytest.approx(total / count, rel=1e-6)
    assert result.metric == "ppl" and result.value == pytest.approx(math.exp(result.loss), rel=1e-12)
    assert result.seconds > 0 and result.tokens_per_s == pytest.approx(count / result.seconds)
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


def test_bad_settings_are_one_config_error():
    model = tiny_model(seed=5)
    data = random_tokens(60, seed=5).numpy()
    with pytest.raises(ConfigError, match="give EvalSettings or its fields, not both"):
        evaluate(model, data, EvalSettings(), batch_size=2)
    with pytest.raises(ConfigError, match="mode: must be 'segment' or 'sliding', got 'nope'"):
        evaluate(model, data, mode="nope")


def test_rows_that_end_leave_the_batch_and_the_rest_keep_their_memory():
    """Segments of 3 rows, then 2, then 1: each row's outputs are those of reading it alone."""
    model = tiny_model(seed=6, tgt_len=3, mem_len=5)
    x = random_tokens(3, 10, seed=6)
    segments = [(x[:3, 0:3], x[:3, 1:4]), (x[:2, 3:6], x[:2, 4:7]), (x[:1, 6:9], x[:1, 7:10])]
    with torch.no_grad():
        together = list(losses_with_memory(model, segments))
        for row in range(3):
            alone = list(losses_with_memory(model, [(i[row:row + 1], t[row:row + 1]) for i, t in segments
                                                    if i.size(0) > row]))
            for a, b in zip(alone, together):
                torch.testing.assert_close(a[0], b[row], rtol=1e-5, atol=1e-5)
        start = model(x[:, :2]).mems  # a memory to start from
        carried = [out.losses for out in outputs_with_memory(model, segments[:1], mems=start)]
        assert torch.equal(carried[0], model(*segments[0], mems=start).losses)
        assert not torch.equal(carried[0], together[0])


def test_row_segments():
    inputs, labels = torch.arange(20).view(2, 10), torch.arange(100, 120).view(2, 10)
    cut = list(row_segments(inputs, labels, 4))
    assert [i.tolist() for i, _ in cut] == [[[0, 1, 2, 3], [10, 11, 12, 13]], [[4, 5, 6, 7], [14, 15, 16, 17]],
                                            [[8, 9], [18, 19]]]
    assert [t[0, 0].item() for _, t in cut] == [100, 104, 108]
    assert [i.size(1) for i, _ in row_segments(inputs, labels, 4, limit=6)] == [4, 2]
    assert [i.size(1) for i, _ in row_segments(inputs, labels, 4, limit=30)] == [4, 4, 2]
    assert all(i.device.type == "cpu" for i, _ in row_segments(inputs, labels, 3, device="cpu"))
