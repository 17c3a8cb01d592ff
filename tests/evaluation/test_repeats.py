"""The repeat analysis (transformer_xl.analysis.repeats): distances against the definition, by hand and
by brute force, alignment with per-token losses, and the block standard error."""

import numpy as np
import pytest

from transformer_xl.analysis.repeats import (
    NO_REPEAT,
    bin_mask,
    distance_bins,
    far_repeat_mask,
    masked_mean,
    paired_difference,
    repeat_distances,
    repeat_distances_brute,
    row_distances,
)
from transformer_xl.evaluation.token_losses import stream_rows


def test_hand_built_bigrams():
    #        a  b  c  a  b  d  a  b  c
    ids = [0, 1, 2, 0, 1, 3, 0, 1, 2]
    d = repeat_distances(ids, 2)
    # bigram "ab" ends at 1, 4, 7; "bc" ends at 2 and 8; every other bigram occurs once
    expected = [NO_REPEAT, NO_REPEAT, NO_REPEAT, NO_REPEAT, 3, NO_REPEAT, NO_REPEAT, 3, 6]
    assert d.tolist() == expected


def test_most_recent_occurrence_counts_not_the_first():
    ids = [5, 6, 7, 5, 6, 7, 5, 6, 7]
    d = repeat_distances(ids, 3)
    # "567" ends at 2, 5, 8; "675" at 3, 6; "756" at 4, 7: every repeat is 3 back, never 6
    assert d.tolist() == [NO_REPEAT] * 5 + [3, 3, 3, 3]


def test_overlapping_occurrences_of_a_run():
    d = repeat_distances([9] * 6, 3)
    # "999" ends at 2, 3, 4, 5: each repeats the one just before (overlap allowed)
    assert d.tolist() == [NO_REPEAT, NO_REPEAT, NO_REPEAT, 1, 1, 1]


def test_unigrams_and_too_short_prefix():
    assert repeat_distances([4, 2, 4, 4], 1).tolist() == [NO_REPEAT, NO_REPEAT, 2, 1]
    assert repeat_distances([1, 2], 3).tolist() == [NO_REPEAT, NO_REPEAT]
    with pytest.raises(ValueError):
        repeat_distances([1, 2, 3], 0)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fast_matches_brute_force(n, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 3, size=300)  # a small alphabet: many repeats at many distances
    assert np.array_equal(repeat_distances(ids, n), repeat_distances_brute(ids, n))


def test_large_token_ids_are_not_confused():
    # ids that share low bytes (256 and 512 vs 0) must not be treated as equal
    ids = [0, 256, 512, 0, 256, 512, 0]
    assert np.array_equal(repeat_distances(ids, 1), repeat_distances_brute(ids, 1))
    assert repeat_distances(ids, 1).tolist() == [NO_REPEAT, NO_REPEAT, NO_REPEAT, 3, 3, 3, 3]


def test_row_distances_align_with_loss_entries():
    data = np.array([1, 2, 3, 1, 2, 3, 7, 8, 9, 7, 8, 9])
    rows = stream_rows(data, 2).numpy()  # [[1 2 3 1 2 3], [7 8 9 7 8 9]]
    d = row_distances(rows, 2)
    assert d.shape == (2, 5)  # losses [b, j] predict token j + 1 of row b
    # row 0: bigrams end at 1..5; "12" at 1 and 4, "23" at 2 and 5
    assert d[0].tolist() == [NO_REPEAT, NO_REPEAT, NO_REPEAT, 3, 3]
    assert d[1].tolist() == [NO_REPEAT, NO_REPEAT, NO_REPEAT, 3, 3]
    # no repeat across rows: row 1 alone has no earlier "12"
    assert row_distances(rows, 2, n_pred=3).tolist() == [[NO_REPEAT] * 3] * 2
    with pytest.raises(ValueError):
        row_distances(rows, 2, n_pred=6)


def test_far_mask_and_bins_partition_the_repeats():
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 4, size=2000)
    d = repeat_distances(ids, 6)
    bins = distance_bins(8, (1, 2, 4))
    assert [b[0] for b in bins] == ["(0, 8]", "(8, 16]", "(16, 32]", "> 32"]
    masks = [bin_mask(d, lo, hi) for _, lo, hi in bins]
    total = np.sum(masks, axis=0)
    assert np.array_equal(total, (d != NO_REPEAT).astype(int))  # every repeat in exactly one bin
    assert np.array_equal(far_repeat_mask(d, 8), (d != NO_REPEAT) & ~masks[0])
    assert (d[masks[1]] > 8).all() and (d[masks[1]] <= 16).all()


def test_masked_mean():
    losses = np.array([[1.0, 2.0, np.nan], [3.0, 4.0, 5.0]])
    mask = np.array([[True, False, False], [True, True, False]])
    assert masked_mean(losses, mask) == (pytest.approx(8 / 3), 3)
    with pytest.raises(ValueError):
        masked_mean(losses, np.ones_like(mask))  # selects a NaN


def test_paired_difference():
    rng = np.random.default_rng(0)
    b = rng.normal(size=(4, 1000))
    a = b + 0.5
    mean, se = paired_difference(a, b, block=100)
    assert mean == pytest.approx(0.5) and se == pytest.approx(0.0, abs=1e-12)
    noisy = b + rng.normal(0.1, 1.0, size=b.shape)
    mean, se = paired_difference(noisy, b, block=100)
    # 4000 independent differences of sd 1: se close to 1 / sqrt(4000)
    assert abs(mean - 0.1) < 4 * se and 0.5 / np.sqrt(4000) < se < 2 / np.sqrt(4000)
    mask = np.zeros(b.shape, dtype=bool)
    mask[:, :10] = True
    assert paired_difference(a, b, mask)[0] == pytest.approx(0.5)


def test_longmem_configs_share_the_budget():
    """The three models of benchmarks/long_memory.py differ only as intended, at equal parameter count."""
    from transformer_xl.model import TransformerXL
    from transformer_xl.training.run_config import load_run_config

    cfgs = {k: load_run_config(f"longmem_{k}") for k in ("xl", "vanilla", "absmem")}
    for c in cfgs.values():
        assert (c.train.max_steps, c.train.batch_size, c.train.lr, c.train.seed) == \
            (cfgs["xl"].train.max_steps, cfgs["xl"].train.batch_size, cfgs["xl"].train.lr, cfgs["xl"].train.seed)
        assert c.data.dataset == "stdlib" and c.model.tgt_len == cfgs["xl"].model.tgt_len
    L = cfgs["xl"].model.tgt_len
    assert (cfgs["xl"].model.attn_type, cfgs["xl"].model.mem_len) == (0, L)
    assert (cfgs["vanilla"].model.attn_type, cfgs["vanilla"].model.mem_len) == (2, 0)
    assert (cfgs["absmem"].model.attn_type, cfgs["absmem"].model.mem_len) == (2, L)
    counts = {k: sum(p.numel() for p in TransformerXL(c.model_config(n_token=256)).parameters())
              for k, c in cfgs.items()}
    assert counts["vanilla"] == counts["xl"] == counts["absmem"], counts
