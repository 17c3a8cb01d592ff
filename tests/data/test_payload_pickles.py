"""The pickle reader refuses a vocabulary whose unpickling would run code, and runs none of it: judged on payload
pickles checked in under tests/fixtures/payload (no transformers, no sacremoses needed), each shown live first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from data_fixtures import one_line

from transformer_xl import TransformerXL, TransformerXLConfig
from transformer_xl.cli import main
from transformer_xl.convert import export_checkpoint
from transformer_xl.data import load_plain_pickle, read_hf_vocab
from transformer_xl.errors import DataError

PAYLOADS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "payload").glob("vocab_*"))
IDS = [p.name for p in PAYLOADS]
PLAIN_UNPICKLE = """import pickle, sys, zipfile
path = sys.argv[1]
data = zipfile.ZipFile(path).read("archive/data.pkl") if path.endswith(".bin") else open(path, "rb").read()
pickle.loads(data)
"""


def test_the_fixtures_are_there():
    assert IDS == ["vocab_exec_p4.pkl", "vocab_exec_zip.bin", "vocab_system_p0.pkl"]


@pytest.mark.parametrize("path", PAYLOADS, ids=IDS)
def test_the_payload_is_live(path, tmp_path):
    """Unpickled by pickle itself (in a child process), the file runs its payload: the marker appears."""
    marker = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-c", PLAIN_UNPICKLE, str(path)], capture_output=True, text=True,
                          env={**os.environ, "TXL_PAYLOAD_MARKER": str(marker)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.exists()


@pytest.mark.parametrize("path", PAYLOADS, ids=IDS)
def test_the_reader_refuses_the_payload_and_runs_nothing(path, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    monkeypatch.setenv("TXL_PAYLOAD_MARKER", str(marker))
    for read in (load_plain_pickle, read_hf_vocab):
        with pytest.raises(DataError) as err:
            read(path)
        msg = one_line(err.value)
        assert "refusing" in msg and ("system" in msg or "exec" in msg), msg
    assert not marker.exists()


@pytest.mark.parametrize("path", PAYLOADS[:1], ids=IDS[:1])
def test_txl_convert_with_a_payload_vocabulary_is_one_line_and_writes_nothing(path, tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    monkeypatch.setenv("TXL_PAYLOAD_MARKER", str(marker))
    model = TransformerXL(TransformerXLConfig(n_token=3, n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=8))
    hf = export_checkpoint(model, tmp_path / "hf", "hf")
    code = main(["convert", "--from", "hf", "--config", str(hf / "config.json"), "--vocab", str(path),
                 str(hf / "model.safetensors"), str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "refusing" in err and "Traceback" not in err, err
    assert not marker.exists() and not (tmp_path / "out").exists()
