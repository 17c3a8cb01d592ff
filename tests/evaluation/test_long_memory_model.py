"""The long-memory study's committed model (results/long_memory/model), used as its README and the project's README
say: ``txl eval`` on a source file it never saw gives what the study measured, with a longer memory reading it for
fewer bits; ``txl generate`` and ``TransformerXL.from_pretrained`` open it; it holds weights only, as trained."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results" / "long_memory"
MODEL = RESULTS / "model"
BITS = re.compile(r"bits/byte (\d+\.\d+)")


def txl_env(tmp_path) -> dict:
    return {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "TXL_CACHE_DIR": str(tmp_path / "cache"), "TXL_DEBUG": "", "OMP_NUM_THREADS": "2"}


def main_table() -> dict:
    """The study's table of the stage the model was copied from."""
    stage = Path(json.loads((RESULTS / "model.json").read_text(encoding="utf-8"))["from"]).parts[-3]
    return json.loads((RESULTS / f"{stage}.json").read_text(encoding="utf-8"))


def readme_commands() -> list:
    """``[(command, bits per byte shown after it)]`` of the README's long-memory block."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- longmem -->\n```console\n(.*?)```\n<!-- /longmem -->", text, re.S)
    assert found, "README: no longmem block"
    out = []
    for line in found.group(1).splitlines():
        if line.startswith("$ "):
            out.append([line[2:], None])
        elif out and BITS.search(line):
            out[-1][1] = float(BITS.search(line).group(1))
    return out


def test_the_model_is_weights_only_small_and_as_trained():
    names = {p.name for p in MODEL.iterdir()}
    assert names == {"config.json", "model.safetensors", "vocab.json", "run.yaml", "README.md"}, names
    assert sum(p.stat().st_size for p in MODEL.iterdir()) <= 25 * 2 ** 20
    cfg = json.loads((MODEL / "config.json").read_text(encoding="utf-8"))
    main = main_table()
    assert cfg["tgt_len"] == cfg["mem_len"] == main["L"], (cfg["tgt_len"], cfg["mem_len"], main["L"])


def test_the_readme_claim_runs_as_written_and_matches_the_study(tmp_path):
    """The README's two commands, as written, from the repository root: each prints the bits per byte the README
    shows and the study's held-out table recorded for that file, and the longer memory costs fewer bits."""
    commands = readme_commands()
    assert len(commands) == 2 and all(bits is not None for _, bits in commands), commands
    held = json.loads((RESULTS / "heldout.json").read_text(encoding="utf-8"))
    printed = []
    for command, shown in commands:
        assert command.startswith("txl eval results/long_memory/model ")
        done = subprocess.run(["bash", "-c", command], cwd=REPO, env=txl_env(tmp_path), capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"$ {command}\n{done.stderr[-2000:]}"
        bits = float(BITS.findall(done.stdout)[-1])
        assert bits == pytest.approx(shown, abs=2e-3), (command, bits, shown)
        mem = re.search(r"--mem-len (\d+)", command).group(1)
        path = re.search(r"/([\w/]+\.py)\"? ", command).group(1)
        recorded = [b["bpc"][mem] for b in held["blocks"] if b["file"].endswith(path)]
        assert recorded and bits == pytest.approx(recorded[0], abs=2e-3), (path, mem, bits, recorded)
        printed.append(bits)
    assert printed[1] < printed[0] - 0.01, printed


def test_generate_and_from_pretrained_open_it(tmp_path):
    done = subprocess.run(["txl", "generate", str(MODEL), "--prompt", "def ", "--max-new-tokens", "24", "--seed",
                           "0"], env=txl_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.startswith("def "), done.stderr[-2000:]
    code = ("from transformer_xl import TransformerXL; m = TransformerXL.from_pretrained(%r); "
            "print(m.config.tgt_len, m.config.mem_len, sum(p.numel() for p in m.parameters()))" % str(MODEL))
    done = subprocess.run([sys.executable, "-c", code], env=txl_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    tgt, mem, params = map(int, done.stdout.split())
    main = main_table()
    assert (tgt, mem, params) == (main["L"], main["L"], main["params"])
