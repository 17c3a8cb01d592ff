"""The decoding cache (model/kv_cache.py): each row of a left-padded batch gets, at every token, the
log-probabilities the model gives that row alone; the cache keeps only the keys a later token can see; its buffers
and position keys."""

from __future__ import annotations

import pytest
import torch
from helpers import random_tokens, tiny_model

from transformer_xl.generation import DecodingCache, generate
from transformer_xl.generation.generate import SegmentDecoder
from transformer_xl.model.attention import distances, sinusoid_table
from transformer_xl.model.kv_cache import PAD, KVBuffer


def cached_log_probs(model, rows, forced, decoding):
    """Left-pad ``rows`` into one batch, feed the prompts ``tgt_len`` columns at a time, then the ``forced`` tokens
    ``[B, n]`` one at a time: next-token log-probs after the prompt and after each forced token, ``[B, n+1, V]``."""
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    pad = torch.ones(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, width - len(row):] = torch.tensor(row)
        pad[b, width - len(row):] = False
    cache = DecodingCache(model, len(rows), decoding=decoding)
    with torch.no_grad():
        for s in range(0, width, model.tgt_len):
            hidden = cache.extend(ids[:, s:s + model.tgt_len], pad[:, s:s + model.tgt_len])
        out = [model.crit.log_probs(hidden[:, -1])]
        cache.end_prompt()
        for t in range(forced.size(1)):
            out.append(model.crit.log_probs(cache.extend(forced[:, t:t + 1])[:, -1]))
    return torch.stack(out, dim=1)


VARIANTS = [dict(mem_init="empty"), dict(mem_init="zeros"), dict(mem_init="zeros", same_length=True, clamp_len=3),
            dict(same_length=True, same_length_extra=1), dict(mem_init="zeros", same_length=True,
                                                               same_length_extra=1),
            dict(mem_init="zeros", mem_len=1)]  # one zero state


@pytest.mark.parametrize("decoding", ["segment", "sliding"])
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}={v}" for k, v in v.items()))
def test_left_padded_rows_get_their_own_log_probs(variant, decoding):
    """Log-probabilities, not only the greedy tokens they pick: with zero memory (mem_init "zeros") the padding
    of a short row once sat between its zero states and its tokens, and moved its distances to them."""
    model = tiny_model(seed=5, **{"tgt_len": 4, "mem_len": 6, **variant})
    rows = [random_tokens(n, seed=n).tolist() for n in (2, 13, 5)]
    forced = random_tokens(3, 5, seed=9)
    batched = cached_log_probs(model, rows, forced, decoding)
    for b, row in enumerate(rows):
        decoder = SegmentDecoder(model, torch.device("cpu"), sliding=decoding == "sliding")
        with torch.no_grad():
            alone = torch.stack([decoder.feed(row)] + [decoder.feed([t]) for t in forced[b].tolist()])
        torch.testing.assert_close(batched[b], alone, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("decoding, same_length", [("segment", False), ("segment", True), ("sliding", False)])
def test_the_cache_keeps_exactly_the_keys_a_later_token_sees(decoding, same_length):
    """After each token: a next token at index n sees its segment so far and the mem_len tokens before the segment
    (segment: runs of tgt_len = 3; sliding: the prompt of 4, then one token per segment); with same_length only the
    mem_len - 1 before it. The cache holds those keys and no others."""
    model = tiny_model(seed=2, tgt_len=3, mem_len=4, same_length=same_length)
    x = random_tokens(1, 12, seed=2)
    cache = DecodingCache(model, 1, decoding=decoding)
    with torch.no_grad():
        cache.extend(x[:, :4])
        cache.end_prompt()
        sizes = [len(cache)]
        for t in range(4, 12):
            cache.extend(x[:, t:t + 1])
            sizes.append(len(cache))
    expected = {("segment", False): [4, 5, 4, 5, 6, 4, 5, 6, 4],  # n = 4..12: from floor(n/3)*3 - 4 (or 0) to n - 1
                ("segment", True): [3, 3, 3, 3, 3, 3, 3, 3, 3],  # the 3 keys before n
                ("sliding", False): [4, 4, 4, 4, 4, 4, 4, 4, 4]}[(decoding, same_length)]
    assert sizes == expected
    assert cache.index[0].tolist() == list(range(12 - expected[-1], 12))


def test_zero_memory_is_cached_as_the_states_before_a_row():
    model = tiny_model(seed=3, tgt_len=2, mem_len=3, mem_init="zeros")
    cache = DecodingCache(model, 2)
    assert len(cache) == 3 and cache.index.tolist() == [[-3, -2, -1]] * 2 and cache.oldest == -3
    zeros = torch.zeros(2, 3, model.config.d_model)
    for i, layer in enumerate(model.layers):
        _, k, v = layer.dec_attn.project(zeros)
        assert torch.equal(cache.keys[i].tensor, k) and torch.equal(cache.values[i].tensor, v)
    assert len(DecodingCache(tiny_model(seed=3, mem_len=3), 2)) == 0


def test_position_keys_cover_every_distance():
    model = tiny_model(seed=4, tgt_len=2, mem_len=3, clamp_len=4)
    cache = DecodingCache(model, 1, max_distance=5)
    assert cache._r_len >= 5
    with torch.no_grad():
        cache.extend(random_tokens(1, 9, seed=4))  # 9 keys: distances up to 9 are needed
        assert cache._r_len >= 10
        for i, layer in enumerate(model.layers):
            r = sinusoid_table(distances(9, model.clamp_len, "cpu"), model.config.d_model)
            torch.testing.assert_close(cache.layer(i).position_keys(9), layer.dec_attn.position_keys(r))


def test_kv_buffer_appends_drops_grows_and_reorders():
    buf = KVBuffer(torch.zeros(2, 1, 0, 3), capacity=2)
    chunks = [torch.full((2, 1, n, 3), float(v)) for n, v in ((1, 1), (2, 2), (3, 3))]
    for chunk in chunks:
        buf.append(chunk)
    assert buf.tensor[0, 0, :, 0].tolist() == [1, 2, 2, 3, 3, 3]
    buf.drop_front(2)
    assert buf.tensor[0, 0, :, 0].tolist() == [2, 3, 3, 3]
    buf.append(torch.full((2, 1, 70, 3), 4.0))  # beyond the capacity: moved into a larger buffer
    assert buf.tensor.shape == (2, 1, 74, 3) and buf.data.size(2) >= 74
    assert buf.tensor[1, 0, :5, 0].tolist() == [2, 3, 3, 3, 4]
    buf = KVBuffer(torch.zeros(2, 1, 0, 1))
    buf.append(torch.arange(8.0).view(2, 1, 4, 1))
    order = torch.tensor([[3, 2, 1, 0], [0, 2, 1, 3]])
    assert buf.reorder(order)[:, 0, :, 0].tolist() == [[3, 2, 1, 0], [4, 6, 5, 7]]


def test_padding_is_pad_and_counts_are_per_row():
    model = tiny_model(seed=6, tgt_len=3, mem_len=2)
    cache = DecodingCache(model, 2)
    with torch.no_grad():
        cache.extend(torch.tensor([[0, 0, 5], [1, 2, 3]]), torch.tensor([[True, True, False], [False] * 3]))
    assert cache.count.tolist() == [1, 3]
    # the next tokens (index 1 of a segment from 0; index 3 of a segment from 3) see indices >= -2 and >= 1
    assert cache.index.tolist() == [[PAD, 0], [1, 2]]


def test_rows_kept_go_on_as_in_the_whole_batch():
    """``keep_rows(n)``: the first n rows continue exactly as they do in the batch that kept every row (rows are
    independent); a batch can keep 1..B rows, no other number."""
    model = tiny_model(seed=12, tgt_len=3, mem_len=4, decoding="sliding")
    x = random_tokens(3, 9, seed=12)
    whole, part = DecodingCache(model, 3), DecodingCache(model, 3)
    with torch.no_grad():
        for cache in (whole, part):
            cache.extend(x[:, :3])
            cache.end_prompt()
        part.keep_rows(3)
        part.keep_rows(2)
        assert part.batch_size == 2 and len(part.prompt_end) == 2
        for t in range(3, 9):
            a, b = whole.extend(x[:, t:t + 1]), part.extend(x[:2, t:t + 1])
            torch.testing.assert_close(b, a[:2], rtol=1e-5, atol=1e-5)
    part.keep_rows(1)
    assert part.batch_size == 1 and part.index.size(0) == 1
    for n in (0, 2):
        with pytest.raises(ValueError, match=f"keep_rows: expected 1..1 rows, got {n}"):
            part.keep_rows(n)


def test_episode_starts_reach_the_cache():
    """``extend(..., starts=)``: the states of the model's own forward with the same episode starts."""
    model = tiny_model(seed=13, tgt_len=6, mem_len=4)
    x = random_tokens(2, 6, seed=13)
    starts = torch.zeros(2, 6, dtype=torch.bool)
    starts[0, 2] = starts[1, 4] = True
    with torch.no_grad():
        cached = DecodingCache(model, 2).extend(x, starts=starts)
        direct = model(x, starts=starts).hidden_states
        torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(cached, DecodingCache(model, 2).extend(x), rtol=1e-3, atol=1e-3)


def test_bad_uses_are_one_value_error():
    model = tiny_model(seed=7)
    with pytest.raises(ValueError, match="decoding: must be 'segment' or 'sliding'"):
        DecodingCache(model, 1, decoding="nope")
    with pytest.raises(ValueError, match="attn_type 0"):
        DecodingCache(tiny_model(seed=7, attn_type=2), 1)
    with pytest.raises(ValueError, match="holds 2 rows, got a batch of 3"):
        DecodingCache(model, 2).extend(torch.zeros(3, 1, dtype=torch.long))


def test_end_prompt_starts_one_segment_per_token_only_when_sliding():
    model = tiny_model(seed=8, tgt_len=2, mem_len=3)
    prompt = random_tokens(5, seed=8).tolist()
    for decoding in ("segment", "sliding"):
        got = generate(model, [prompt], max_new_tokens=6, do_sample=False, decoding=decoding)
        assert got == generate(model, [prompt], max_new_tokens=6, do_sample=False, decoding=decoding,
                               method="segment")
    segment = DecodingCache(model, 1, decoding="segment")
    segment.end_prompt()
    assert segment.prompt_end is None


@pytest.mark.parametrize("rows_kept", [[2, 0, 2], [1, 1], [0, 1, 2], [2, 1, 0]], ids=str)
def test_selected_rows_go_on_as_those_rows_alone(rows_kept):
    """``select_rows`` (beam search keeping its best beams, rows repeated or reordered, as many rows or fewer): the
    rows kept give, at every later token, the log-probabilities of those rows decoded alone."""
    model = tiny_model(seed=6, tgt_len=4, mem_len=5, mem_init="zeros")
    rows = [random_tokens(n, seed=20 + n).tolist() for n in (3, 7, 5)]
    forced = random_tokens(len(rows_kept), 4, seed=3)
    width = max(map(len, rows))
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    pad = torch.ones(len(rows), width, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, width - len(row):], pad[b, width - len(row):] = torch.tensor(row), False
    cache = DecodingCache(model, len(rows), decoding="sliding")
    with torch.no_grad():
        cache.extend(ids, pad)
        cache.end_prompt()
        cache.select_rows(torch.tensor(rows_kept))
        got = torch.stack([model.crit.log_probs(cache.extend(forced[:, t:t + 1])[:, -1]) for t in range(4)], 1)
    for b, kept in enumerate(rows_kept):
        decoder = SegmentDecoder(model, torch.device("cpu"), sliding=True)
        with torch.no_grad():
            decoder.feed(rows[kept])
            alone = torch.stack([decoder.feed([t]) for t in forced[b].tolist()])
        torch.testing.assert_close(got[b], alone, rtol=1e-5, atol=1e-5)
    assert cache.batch_size == len(rows_kept) and len(cache.index) == len(rows_kept)


@pytest.mark.parametrize("variant", VARIANTS + [dict(mem_init="empty", same_length=True)],
                         ids=lambda v: "-".join(f"{k}={v}" for k, v in v.items()))
def test_repeating_sliding_steps_read_back_their_visibility_and_stay_exact(variant, monkeypatch):
    """Rows of one length (no padding), then one token at a time well past the memory: after a step of each kind
    the cache stops computing visibility (the mask is worked out a few times, not at each of the 20 tokens), holds
    no more than the memory, and every row still gets, at every token, the log-probabilities the plain model
    gives that row alone. Beam search's row selection in between keeps it so."""
    model = tiny_model(seed=7, **{"tgt_len": 4, "mem_len": 6, **variant})
    rows = [random_tokens(5, seed=30 + b).tolist() for b in range(3)]
    forced = random_tokens(3, 20, seed=4)
    cache = DecodingCache(model, 3, decoding="sliding")
    masks = []
    original = DecodingCache._forbidden
    monkeypatch.setattr(DecodingCache, "_forbidden", lambda self, *a: masks.append(1) or original(self, *a))
    with torch.no_grad():
        cache.extend(torch.tensor(rows))
        cache.end_prompt()
        got = [model.crit.log_probs(cache.extend(forced[:, t:t + 1])[:, -1]) for t in range(10)]
        cache.select_rows(torch.tensor([2, 0, 0]))
        got += [model.crit.log_probs(cache.extend(forced[:, t:t + 1])[:, -1]) for t in range(10, 20)]
    assert len(masks) <= 1 + model.mem_len + 3, f"visibility computed {len(masks)} times over 21 calls"
    assert len(cache) <= model.mem_len  # and it keeps no key that the next token cannot see
    got = torch.stack(got, 1)  # [3, 20, V]
    for b, kept in enumerate([2, 0, 0]):
        decoder = SegmentDecoder(model, torch.device("cpu"), sliding=True)
        with torch.no_grad():
            decoder.feed(rows[b])
            first = [decoder.feed([t]) for t in forced[b, :10].tolist()]
            decoder = SegmentDecoder(model, torch.device("cpu"), sliding=True)
            decoder.feed(rows[kept])
            for t in forced[kept, :10].tolist():
                decoder.feed([t])
            second = [decoder.feed([t]) for t in forced[b, 10:].tolist()]
        torch.testing.assert_close(got[b, :10], torch.stack(first), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[b, 10:], torch.stack(second), rtol=1e-5, atol=1e-5)
