"""Converting the authors' TensorFlow checkpoints (``txl convert --from tf``), without TensorFlow.

The fixtures in tests/fixtures/tf were written by TensorFlow running the authors' own ``tf/model.py``
(tests/fixtures/make_tf_checkpoints.py); ``expected.npz`` holds the per-token losses TensorFlow
computed over 3 or more segments with memory carried (and, for the newer fixtures, ``mem_lens``: the
memory length TensorFlow attended to in each segment). Nothing here imports TensorFlow.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import assert_real_signal

from transformer_xl.convert.tf import convert_tf_checkpoint, load_tf_model, read_flags
from transformer_xl.convert.tf_checkpoint import TFCheckpoint, crc32c, mask_crc, read_tf_checkpoint
from transformer_xl.errors import CheckpointError, ConfigError
from transformer_xl.model import TransformerXL, empty_mems

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf"
MODELS = ["adaptive_div4", "div1_proj", "lm1b_like", "char"]
# Made later, with mem_lens recorded: exactly one tail cluster; same_length from an empty memory (growing
# 0, 3, 6, 7 with mem_len 7; 0, 3, 3 with segments of 5 and mem_len 3); d_model not divisible by n_head.
NEWER_MODELS = ["one_tail", "same_length_empty", "same_length_short", "heads_3x8"]
SHARD = "model.ckpt.data-00000-of-00001"


def tf_losses(model: TransformerXL, flags: dict, expected) -> np.ndarray:
    """Per-token losses ``[S, tgt_len, B]`` of the converted model over the fixture's S segments, memory
    carried from the start TensorFlow had, with the flags' run-time lengths, as the authors' train_gpu.py
    evaluates.

    The converted config keeps TensorFlow's conventions: memory starts as ``mem_len`` zero states
    (``mem_init="zeros"``, what train_gpu.py does; ``mems=None`` gives it), and its same_length mask lets
    each query see the memory present + 1 keys (``same_length_extra=1``). Where the fixture started
    TensorFlow from an empty memory (``mem_lens[0] == 0``), so does this; the memory lengths of every
    segment must be TensorFlow's.
    """
    model.reset_length(flags["tgt_len"], 0, flags["mem_len"], flags["clamp_len"], flags["same_length"])
    tgt, n_seg = flags["tgt_len"], expected["losses"].shape[0]
    ids = torch.from_numpy(expected["tokens"].T.astype(np.int64))  # [B, T]
    mem_lens = expected["mem_lens"] if "mem_lens" in expected else None
    mems = None if mem_lens is None or mem_lens[0] else empty_mems(model.config.n_layer, ids.size(0), flags["d_model"])
    losses = []
    with torch.no_grad():
        for s in range(n_seg):
            out = model(ids[:, s * tgt:(s + 1) * tgt], labels=ids[:, s * tgt + 1:(s + 1) * tgt + 1], mems=mems)
            mems = out.mems
            losses.append(out.losses.T.numpy())  # [L, B]
            if mem_lens is not None:
                assert mems[0].size(1) == mem_lens[s + 1], "memory length differs from TensorFlow's"
    return np.stack(losses)


@pytest.mark.parametrize("name", MODELS)
def test_converted_model_reproduces_tensorflow_losses(name, tmp_path):
    d = FIXTURES / name
    flags = json.loads((d / "flags.json").read_text())
    expected = np.load(d / "expected.npz")
    convert_tf_checkpoint(d / "model.ckpt", d / "flags.json", tmp_path / "out")
    model = TransformerXL.from_pretrained(tmp_path / "out")
    assert_real_signal(model.eval(), torch.randint(0, model.config.n_token, (2, 12),
                                                   generator=torch.Generator().manual_seed(0)))
    got = tf_losses(model, flags, expected)
    assert got.shape == expected["losses"].shape
    np.testing.assert_allclose(got, expected["losses"], rtol=0, atol=1e-4)
    assert model.config.layer_norm_epsilon == 1e-12
    assert (model.config.mem_init, model.config.same_length_extra) == ("zeros", 1)


def test_fixtures_cover_the_variants():
    flags = {n: json.loads((FIXTURES / n / "flags.json").read_text()) for n in MODELS}
    assert any(len(f["cutoffs"]) == 3 and f["div_val"] == 4 for f in flags.values())
    assert any(f["div_val"] == 1 and f["d_embed"] != f["d_model"] and f["cutoffs"] for f in flags.values())
    assert {f["untie_r"] for f in flags.values()} == {True, False}
    assert any(f["same_length"] and f["clamp_len"] > 0 for f in flags.values())
    assert any(not f["cutoffs"] for f in flags.values())


@pytest.mark.parametrize("name", NEWER_MODELS)
def test_txl_convert_reproduces_tensorflow_losses_of_newer_fixtures(name, tmp_path, capsys):
    """Converted by ``txl convert --from tf``, run from the memory TensorFlow started from (empty for the
    same_length ones, so that the window follows the memory present), memory carried over the segments."""
    from transformer_xl.cli import main

    d = FIXTURES / name
    code = main(["convert", "--from", "tf", "--config", str(d / "flags.json"), str(d / "model.ckpt"),
                 str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    flags = json.loads((d / "flags.json").read_text())
    expected = np.load(d / "expected.npz")
    got = tf_losses(TransformerXL.from_pretrained(tmp_path / "out"), flags, expected)
    assert got.shape == expected["losses"].shape
    np.testing.assert_allclose(got, expected["losses"], rtol=0, atol=1e-4)


def test_newer_fixtures_cover_what_they_are_for():
    flags = {n: json.loads((FIXTURES / n / "flags.json").read_text()) for n in NEWER_MODELS}
    mem_lens = {n: np.load(FIXTURES / n / "expected.npz")["mem_lens"] for n in NEWER_MODELS}
    assert any(len(f["cutoffs"]) == 1 for f in flags.values())
    empty_start = [n for n in NEWER_MODELS if flags[n]["same_length"] and mem_lens[n][0] == 0]
    seen = [(m, flags[n]) for n in empty_start for m in mem_lens[n][:-1]]  # memory attended to per segment
    assert any(0 < m < f["mem_len"] for m, f in seen), "a segment with a memory shorter than mem_len"
    assert any(0 < m < f["tgt_len"] for m, f in seen), "a segment with a memory shorter than the segment"
    assert any(f["d_model"] % f["n_head"] for f in flags.values())


def test_optimizer_slots_and_counters_are_skipped():
    prefix = FIXTURES / "adaptive_div4" / "model.ckpt"
    names = set(TFCheckpoint(prefix))
    assert {"global_step", "beta1_power", "transformer/r_w_bias/Adam", "transformer/r_w_bias/Adam_1"} <= names
    weights = read_tf_checkpoint(prefix)
    assert "transformer/r_w_bias" in weights
    assert not [n for n in weights if n.endswith(("/Adam", "/Adam_1")) or n in ("global_step", "beta1_power")]
    assert len(weights) == len([n for n in names if not n.endswith(("/Adam", "/Adam_1"))]) - 3


def test_reads_float32_float16_bfloat16_int64_as_tensorflow_stored_them():
    prefix = FIXTURES / "foreign" / "model.ckpt"
    ckpt = TFCheckpoint(prefix)
    assert {n: e.dtype for n, e in ckpt.items()} == {
        "dense/kernel": "float32", "embedding/half": "float16", "embedding/bf16": "bfloat16", "counter": "int64"}
    values = read_tf_checkpoint(prefix, weights_only=False)
    expected = np.load(FIXTURES / "foreign" / "expected.npz")  # what TensorFlow's session returned
    assert values["embedding/half"].dtype == np.float16 and values["embedding/bf16"].dtype == np.float32
    for name, value in values.items():
        np.testing.assert_array_equal(value.astype(np.float64), expected[name.replace("/", ".")])


def test_crc32c_matches_the_standard_check_value_and_the_bytewise_definition():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720 / the CRC catalogue's check value
    assert crc32c(b"") == 0

    def bitwise(data: bytes) -> int:
        crc = 0xFFFFFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        return crc ^ 0xFFFFFFFF

    data = np.random.default_rng(0).integers(0, 256, 2048 * 9 + 13, dtype=np.uint8).tobytes()  # vectorised path
    assert crc32c(data) == bitwise(data)
    assert mask_crc(0) == 0xA282EAD8


# ---------------------------------------------------------------------------- bad input
def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst)
    return dst / "model.ckpt"


def _one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


def test_truncated_index(tmp_path):
    prefix = _copy("char", tmp_path)
    index = Path(f"{prefix}.index")
    index.write_bytes(index.read_bytes()[:-20])
    with pytest.raises(CheckpointError) as exc:
        load_tf_model(prefix, FIXTURES / "char" / "flags.json")
    assert "model.ckpt.index" in _one_line(exc)


def test_truncated_data_shard(tmp_path):
    prefix = _copy("char", tmp_path)
    shard = prefix.parent / SHARD
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated data shard") as exc:
        load_tf_model(prefix, FIXTURES / "char" / "flags.json")
    _one_line(exc)


@pytest.mark.parametrize("where", ["data", "index"])
def test_checksum_mismatch(where, tmp_path):
    prefix = _copy("char", tmp_path)
    path = prefix.parent / SHARD if where == "data" else Path(f"{prefix}.index")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x10
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="checksum mismatch") as exc:
        load_tf_model(prefix, FIXTURES / "char" / "flags.json")
    _one_line(exc)


def test_missing_shard(tmp_path):
    prefix = _copy("char", tmp_path)
    (prefix.parent / SHARD).unlink()
    with pytest.raises(CheckpointError, match="data shard not found") as exc:
        load_tf_model(prefix, FIXTURES / "char" / "flags.json")
    _one_line(exc)


def test_missing_index():
    with pytest.raises(CheckpointError, match="file not found"):
        load_tf_model(FIXTURES / "char" / "nope.ckpt", FIXTURES / "char" / "flags.json")


def test_checkpoint_of_another_architecture():
    with pytest.raises(CheckpointError, match="not a checkpoint of the authors' Transformer-XL") as exc:
        load_tf_model(FIXTURES / "foreign" / "model.ckpt", FIXTURES / "char" / "flags.json")
    _one_line(exc)


def test_flags_that_do_not_match_the_shapes(tmp_path):
    flags = json.loads((FIXTURES / "char" / "flags.json").read_text())
    flags["d_inner"] = 64
    with pytest.raises(ConfigError) as exc:
        load_tf_model(FIXTURES / "char" / "model.ckpt", flags)
    msg = _one_line(exc)
    assert "transformer/layer_0/ff/layer_1/kernel" in msg and "[16, 32]" in msg and "[16, 64]" in msg
    flags = json.loads((FIXTURES / "char" / "flags.json").read_text())
    flags["untie_r"] = True
    with pytest.raises(ConfigError, match=r"transformer/r_w_bias has shape \[2, 8\] .* \[2, 2, 8\]"):
        load_tf_model(FIXTURES / "char" / "model.ckpt", flags)


def test_builtin_config_of_another_size_is_reported():
    with pytest.raises(ConfigError, match="transformer/.* has shape") as exc:
        load_tf_model(FIXTURES / "char" / "model.ckpt", "enwik8_base")
    _one_line(exc)


def test_unknown_flag_and_bad_values():
    with pytest.raises(ConfigError, match="unknown flag"):
        read_flags({"n_layers": 2})
    with pytest.raises(ConfigError, match="same_length"):
        read_flags({"same_length": "maybe"})


def test_flags_in_shell_form_and_corpus_info_cutoffs():
    flags = read_flags({"--n_layer": "18", "--untie_r": "True", "n_token": 267735,
                        "cutoffs": [0, 20000, 40000, 200000, 267735]})
    assert flags["n_layer"] == 18 and flags["untie_r"] is True and flags["cutoffs"] == [20000, 40000, 200000]


def test_n_token_and_cutoffs_come_from_the_shapes_when_absent(tmp_path):
    flags = json.loads((FIXTURES / "adaptive_div4" / "flags.json").read_text())
    del flags["n_token"], flags["cutoffs"]
    model = load_tf_model(FIXTURES / "adaptive_div4" / "model.ckpt", flags)
    assert model.config.n_token == 240 and model.config.cutoffs == [30, 60, 120]


class _Vocab:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def save(self, directory):
        (Path(directory) / "vocab.json").write_text(json.dumps({"size": self.n}))


def test_vocabulary_is_checked_and_saved(tmp_path):
    d = FIXTURES / "char"
    with pytest.raises(ConfigError, match="vocabulary: has 49 symbols but the checkpoint has n_token=50"):
        convert_tf_checkpoint(d / "model.ckpt", d / "flags.json", tmp_path / "bad", vocab=_Vocab(49))
    convert_tf_checkpoint(d / "model.ckpt", d / "flags.json", tmp_path / "ok", vocab=_Vocab(50))
    assert json.loads((tmp_path / "ok" / "vocab.json").read_text()) == {"size": 50}


def test_txl_convert_from_tf(tmp_path, capsys):
    from transformer_xl.cli import main

    d = FIXTURES / "adaptive_div4"
    assert main(["convert", "--from", "tf", "--config", str(d / "flags.json"), str(d / "model.ckpt"),
                 str(tmp_path / "out")]) == 0
    flags = json.loads((d / "flags.json").read_text())
    expected = np.load(d / "expected.npz")
    got = tf_losses(TransformerXL.from_pretrained(tmp_path / "out"), flags, expected)
    np.testing.assert_allclose(got, expected["losses"], rtol=0, atol=1e-4)
    code = main(["convert", "--from", "tf", "--config", str(d / "flags.json"), str(d / "missing"),
                 str(tmp_path / "o2")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "missing.index" in err
    assert not (tmp_path / "o2").exists()
