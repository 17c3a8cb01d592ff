"""Every shape the config accepts runs: any ``n_head x d_head`` against any ``d_model``, odd widths, adaptive
input and softmax widths, each attention type, pre- and post-LN, ``same_length``, GTrXL gates. A config either
refuses a shape in one ``ConfigError`` naming a field, or the model trains on it with memory, decodes with its
cache and (attn_type 0) gives the same losses through the streamed attention."""

from __future__ import annotations

import itertools

import pytest
import torch

from transformer_xl.errors import ConfigError
from transformer_xl.generation import generate
from transformer_xl.model import TransformerXL, TransformerXLConfig

HEADS = [(2, 8, 16), (3, 5, 16), (1, 7, 9), (4, 3, 13), (2, 9, 17), (5, 1, 6), (1, 1, 2), (3, 4, 12)]
EMBEDDINGS = [(None, 1, []), (7, 2, [5]), (9, 1, [3, 7]), (6, 4, [4, 8])]
NORMS = [dict(pre_lnorm=False, same_length=False, gating="none"), dict(pre_lnorm=True, same_length=True, gating="none"),
         dict(pre_lnorm=True, same_length=False, gating="gru")]
#: Each attention type with each head shape; the embedding widths and layer norms vary along the list.
GRID = [dict(attn_type=a, n_head=h, d_head=dh, d_model=dm, d_embed=EMBEDDINGS[i % 4][0], div_val=EMBEDDINGS[i % 4][1],
             cutoffs=EMBEDDINGS[i % 4][2], **NORMS[(i + i // 4) % 3])
        for i, (a, (h, dh, dm)) in enumerate(itertools.product(range(4), HEADS))]


def config(**shape) -> TransformerXLConfig:
    return TransformerXLConfig(n_token=12, n_layer=2, d_inner=11, tgt_len=4, mem_len=3, clamp_len=2, dropout=0.0,
                               **shape)


def runs(cfg: TransformerXLConfig) -> None:
    torch.manual_seed(0)
    model = TransformerXL(cfg)
    ids = torch.randint(0, cfg.n_token, (2, 2 * cfg.tgt_len + 1))
    mems, losses = None, []
    for s in range(0, 2 * cfg.tgt_len, cfg.tgt_len):
        out = model(ids[:, s:s + cfg.tgt_len], labels=ids[:, s + 1:s + cfg.tgt_len + 1], mems=mems)
        out.loss.backward()
        mems, losses = out.mems, losses + [out.losses.detach()]
        assert torch.isfinite(out.loss) and len(mems) == cfg.n_layer and mems[0].shape[-1] == cfg.d_model
    model.eval()
    with torch.no_grad():
        new = generate(model, [[1, 2, 3]], max_new_tokens=cfg.tgt_len + 2, do_sample=False)
        assert len(new[0]) == cfg.tgt_len + 2
        if cfg.attn_type == 0:
            plain = model(ids[:, :cfg.tgt_len], labels=ids[:, 1:cfg.tgt_len + 1]).losses
            model.set_attention("streamed", 2)
            streamed = model(ids[:, :cfg.tgt_len], labels=ids[:, 1:cfg.tgt_len + 1]).losses
            torch.testing.assert_close(streamed, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", GRID, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_an_accepted_config_runs_and_a_refused_one_names_its_field(shape):
    try:
        cfg = config(**shape)
    except ConfigError as exc:
        field = str(exc).split(":", 1)[0]
        assert field in shape or field == "d_head", exc
        assert "\n" not in str(exc)
        return
    runs(cfg)


@pytest.mark.parametrize("attn_type", [0, 1, 2, 3])
def test_an_odd_width_is_refused_only_where_the_sinusoid_needs_it(attn_type):
    shape = dict(attn_type=attn_type, n_head=5, d_head=13, d_model=65)
    if attn_type in (0, 2):
        with pytest.raises(ConfigError, match=r"^d_model: must be even with attn_type=\d"):
            config(**shape)
    else:
        runs(config(**shape))


def test_the_grid_reaches_the_shapes_it_is_about():
    accepted = []
    for shape in GRID:
        try:
            accepted.append(config(**shape))
        except ConfigError:
            pass
    assert any(c.n_head * c.d_head != c.d_model for c in accepted)
    assert any(c.d_model % 2 for c in accepted) and any(c.d_head % 2 for c in accepted)
    assert {c.attn_type for c in accepted} == {0, 1, 2, 3} and any(c.gating == "gru" for c in accepted)
