"""LMOrderedIterator: continuity on real PTB, shifted labels, ext_len, varlen, exact resume, sharding."""

import json

import numpy as np
import pytest
import torch
from data_fixtures import one_line

from transformer_xl.data import LMOrderedIterator
from transformer_xl.errors import DataError


def streams_of(data, batch_size):
    """The B contiguous streams [B, n] the iterator must cut ``data`` into."""
    data = np.asarray(data)
    n = len(data) // batch_size
    return data[: n * batch_size].reshape(batch_size, n)


def test_rows_continue_across_batches_on_real_ptb(ptb):
    batch_size, tgt_len = 8, 35
    streams = streams_of(ptb.train, batch_size)
    batches = list(LMOrderedIterator(ptb.train, batch_size, tgt_len))
    for prev, nxt in zip(batches, batches[1:]):
        # row r of batch t+1 starts exactly where row r of batch t ended
        assert torch.equal(nxt[0][:, 0], prev[1][:, -1])
    inputs = torch.cat([b[0] for b in batches], dim=1).numpy()
    labels = torch.cat([b[1] for b in batches], dim=1).numpy()
    assert np.array_equal(inputs, streams[:, :-1])  # every position once, in order
    assert np.array_equal(labels, streams[:, 1:])


def test_labels_are_inputs_shifted_by_one(ptb):
    for inputs, labels, seq_len in LMOrderedIterator(ptb.valid, 4, 50):
        assert inputs.dtype == labels.dtype == torch.int64
        assert inputs.shape == labels.shape == (4, seq_len)
        assert torch.equal(labels[:, :-1], inputs[:, 1:])


def test_len_and_n_tokens_match_iteration():
    data = np.arange(1003)
    for batch_size, tgt_len in [(4, 7), (3, 10), (1, 1000), (5, 199)]:
        it = LMOrderedIterator(data, batch_size, tgt_len)
        expected_len, expected_tokens = len(it), it.n_tokens
        batches = list(it)
        assert len(batches) == expected_len
        assert sum(b[1].numel() for b in batches) == expected_tokens == batch_size * (len(data) // batch_size - 1)


def test_ext_len_prepends_preceding_tokens():
    data = np.arange(400)
    ext, tgt = 6, 10
    streams = streams_of(data, 4)
    i = 0
    for inputs, labels, seq_len in LMOrderedIterator(data, 4, tgt, ext_len=ext):
        beg = max(0, i - ext)
        assert np.array_equal(inputs.numpy(), streams[:, beg:i + seq_len])
        assert np.array_equal(labels.numpy(), streams[:, i + 1:i + 1 + seq_len])
        i += seq_len


def expected_varlen(seed, n_step, bptt, std=5.0, min_len=5, max_deviation=3):
    """The original get_varlen_iter's lengths, with its np.random calls drawn from a seeded Generator."""
    rng = np.random.default_rng(seed)
    max_len = bptt + max_deviation * std
    lengths, i = [], 0
    while True:
        b = bptt if rng.random() < 0.95 else bptt / 2.0
        b = int(min(max_len, max(min_len, int(rng.normal(b, std)))))
        seq_len = min(b, n_step - 1 - i)
        lengths.append(seq_len)
        i += seq_len
        if i >= n_step - 2:
            return lengths


def test_varlen_lengths_follow_the_original_rule():
    data = np.arange(20000)
    it = LMOrderedIterator(data, 4, 30, varlen=True, seed=11)
    predicted = len(it)
    lengths = [b[2] for b in it]
    assert lengths == expected_varlen(11, 5000, 30)
    assert predicted == len(lengths)
    assert all(5 <= n <= 45 for n in lengths[:-1])
    assert len(set(lengths)) > 5  # really variable
    other = [b[2] for b in LMOrderedIterator(data, 4, 30, varlen=True, seed=12)]
    assert other != lengths


def test_resume_mid_epoch_gives_identical_batches_varlen(ptb):
    kwargs = dict(varlen=True, seed=5, ext_len=3)
    full = list(LMOrderedIterator(ptb.train, 6, 40, **kwargs))
    it = LMOrderedIterator(ptb.train, 6, 40, **kwargs)
    gen = iter(it)
    head = [next(gen) for _ in range(17)]
    state = json.loads(json.dumps(it.state_dict()))  # must survive JSON
    fresh = LMOrderedIterator(ptb.train, 6, 40, **{**kwargs, "seed": 999})
    fresh.load_state_dict(state)
    rest = list(fresh)
    assert len(head) + len(rest) == len(full)
    for got, want in zip(head + rest, full):
        assert got[2] == want[2]
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    # the uninterrupted iterator, continued, matches too
    assert [b[2] for b in gen] == [b[2] for b in rest]


def test_epochs_continue_and_resume_across_epoch_boundary():
    data = np.arange(3000)
    ref = LMOrderedIterator(data, 2, 25, varlen=True, seed=1)
    epoch0, epoch1 = [b[2] for b in ref], [b[2] for b in ref]
    assert ref.epoch == 2 and epoch0 != epoch1  # the generator keeps going: new lengths each epoch
    it = LMOrderedIterator(data, 2, 25, varlen=True, seed=1)
    assert [b[2] for b in it] == epoch0
    state = it.state_dict()
    assert state["epoch"] == 1 and state["position"] == 0
    fresh = LMOrderedIterator(data, 2, 25, varlen=True, seed=1)
    fresh.load_state_dict(state)
    assert [b[2] for b in fresh] == epoch1


def test_state_from_other_layout_is_rejected():
    it = LMOrderedIterator(np.arange(500), 4, 10)
    state = it.state_dict()
    with pytest.raises(DataError) as info:
        LMOrderedIterator(np.arange(500), 5, 10).load_state_dict(state)
    assert "batch_size" in one_line(info.value)
    with pytest.raises(DataError):
        it.load_state_dict({"position": 3})


@pytest.mark.parametrize("world_size", [2, 4])
def test_shards_concatenate_to_the_single_process_batch(ptb, world_size):
    kwargs = dict(varlen=True, seed=3, ext_len=2)
    single = list(LMOrderedIterator(ptb.valid, 8, 30, **kwargs))
    ranks = [list(LMOrderedIterator(ptb.valid, 8, 30, rank=r, world_size=world_size, **kwargs))
             for r in range(world_size)]
    assert all(len(r) == len(single) for r in ranks)
    for t, (inputs, labels, seq_len) in enumerate(single):
        assert all(r[t][0].shape[0] == 8 // world_size for r in ranks)
        assert torch.equal(torch.cat([r[t][0] for r in ranks]), inputs)
        assert torch.equal(torch.cat([r[t][1] for r in ranks]), labels)
        assert all(r[t][2] == seq_len for r in ranks)


def test_sharded_state_resumes_with_another_world_size():
    data = np.arange(4000)
    it = LMOrderedIterator(data, 4, 20, varlen=True, seed=2, rank=0, world_size=2)
    gen = iter(it)
    for _ in range(5):
        next(gen)
    single = LMOrderedIterator(data, 4, 20, varlen=True, seed=2)
    single.load_state_dict(it.state_dict())
    rest_single = list(single)
    rest_rank0 = list(gen)
    assert [b[2] for b in rest_single] == [b[2] for b in rest_rank0]
    assert all(torch.equal(a[0][:2], b[0]) for a, b in zip(rest_single, rest_rank0))


def test_bad_arguments():
    data = np.arange(100)
    with pytest.raises(DataError) as info:
        LMOrderedIterator(data, 6, 10, world_size=4)
    assert "divisible" in one_line(info.value)
    with pytest.raises(DataError):
        LMOrderedIterator(data, 4, 10, rank=4, world_size=4)
    with pytest.raises(DataError):
        LMOrderedIterator(data, 60, 10)  # one token per stream
    with pytest.raises(DataError):
        LMOrderedIterator(np.zeros((4, 4), dtype=np.int64), 2, 2)


def test_accepts_tensors_and_memmaps_and_sets_device(ptb):
    assert isinstance(ptb.train, np.memmap)
    a = list(LMOrderedIterator(torch.as_tensor(np.asarray(ptb.test, dtype=np.int64)), 2, 64, device="cpu"))
    b = list(LMOrderedIterator(ptb.test, 2, 64, device=torch.device("cpu")))
    assert all(torch.equal(x[0], y[0]) and x[0].device.type == "cpu" for x, y in zip(a, b))
