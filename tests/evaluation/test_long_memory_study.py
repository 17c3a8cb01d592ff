"""The long-memory study's stage runner (benchmarks/long_memory.py), run as users run it, on a tiny budget: every
stage writes its JSON table; a finished stage is skipped; a training stage killed mid-way is refused without
--resume and continued with it, from its checkpoint, to the same number of steps."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "long_memory.py"

PLAN = """
corpus: default
config: longmem_xl
controls: {{vanilla: longmem_vanilla, absmem: longmem_absmem}}
bytes_per_step: 64
precision: fp32
threads: 1
lengths: [8]
budgets: [{budget}]
main: {{length: 8, budget: {budget}}}
train_args: [--n-layer, "2", --d-model, "32", --d-inner, "64", --n-head, "2", --d-head, "16", --eval-interval, "{ev}",
             --train.save-interval, "{ev}"]
eval: {{rows: 2, predictions: 96, multiples: [1, 2, 4], clamp: 2, block: 16}}
distance: {{ngram: 4}}
"""


def study(tmp_path, *args, budget="3K", ev=1000, wait=True, **popen):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(budget=budget, ev=ev), encoding="utf-8")
    cmd = [sys.executable, str(SCRIPT), "--plan", str(plan), "--out", str(tmp_path / "runs"),
           "--results", str(tmp_path / "results"), "--plot", str(tmp_path / "budget.png"), *args]
    env = {**os.environ, "TXL_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    if not wait:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def train_steps(run_dir: Path):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x)["step"] for x in lines if json.loads(x).get("split") == "train"]


def test_every_stage_writes_its_table_then_is_skipped(tmp_path):
    first = study(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    results = tmp_path / "results"
    names = ["xl-L8-3K", "vanilla-L8-3K", "absmem-L8-3K", "distance", "model", "summary"]
    assert sorted(p.stem for p in results.glob("*.json")) == sorted(names)
    xl = json.loads((results / "xl-L8-3K.json").read_text())
    assert xl["train"]["steps"] == round(3000 / 64) and xl["L"] == 8 and xl["eval"]["tokens"] == 2 * 96
    # the table's gains are the differences of its own bits per byte (paired over the same predictions)
    g = xl["gain"]["vs_L"]["no clamp | M=32"]
    assert g["gain"] == pytest.approx(xl["bpc"]["M=8, same_length"] - xl["bpc"]["M=32, same_length"], abs=1e-9)
    assert g["se"] > 0
    # the M = L row is what `txl eval` prints for the same tokens (the command the table names)
    ev = subprocess.run([sys.executable, "-m", "transformer_xl", "eval", str(tmp_path / "runs" / "xl-L8-3K"),
                         "--split", "valid", "--batch-size", "2", "--max-steps", "12", "--same-length",
                         "--mem-len", "32", "--json"], capture_output=True, text=True,
                        env={**os.environ, "TXL_CACHE_DIR": str(tmp_path / "cache")})
    assert ev.returncode == 0, ev.stderr
    assert json.loads(ev.stdout.splitlines()[-1])["loss"] / 0.6931471805599453 == \
        pytest.approx(xl["bpc"]["M=32, same_length"], abs=2e-4)
    model = tmp_path / "results" / "model"
    assert {"config.json", "model.safetensors", "vocab.json", "run.yaml", "README.md"} <= \
        {p.name for p in model.iterdir()}
    assert json.loads((model / "config.json").read_text())["mem_len"] == 8
    stamps = {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")}

    again = study(tmp_path)
    assert again.returncode == 0, again.stderr
    assert all(f"{n}: done" in again.stdout for n in names), again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in results.glob("*.json")} == stamps
    assert "training" not in again.stdout


def test_a_killed_stage_is_refused_then_resumed(tmp_path):
    # a long enough training (1,500 steps, a checkpoint every 100) to be killed half-way
    proc = study(tmp_path, "--only", "xl-L8-96K", budget="96K", ev=100, wait=False)
    run = tmp_path / "runs" / "xl-L8-96K"
    deadline = time.time() + 240
    while time.time() < deadline and not (run / "checkpoints").is_dir():
        time.sleep(0.2)
    assert (run / "checkpoints").is_dir(), proc.communicate()[0]
    os.killpg(proc.pid, signal.SIGTERM)  # as a terminal closing, or a job scheduler, stops the whole job
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 2 and not (tmp_path / "results" / "xl-L8-96K.json").exists()
    # the script passed the signal on once: txl train wrote a checkpoint of the step it was at, and said so
    killed_at = int(sorted((run / "checkpoints").iterdir())[-1].name.split("_")[1])
    assert 100 <= killed_at < 1500
    assert out.strip().splitlines()[-1] == (
        f"long_memory.py: stage xl-L8-96K: training stopped at step {killed_at:,} of 1,500 (exit 143); run again "
        f"with --resume to continue it")

    refused = study(tmp_path, "--only", "xl-L8-96K", budget="96K", ev=100)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"long_memory.py: stage xl-L8-96K: {run} holds an unfinished run; pass --resume to continue it, "
        f"or delete the folder to start it again"]

    resumed = study(tmp_path, "--only", "xl-L8-96K", "--resume", budget="96K", ev=100)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert train_steps(run)[-1] == 1500
    # the second txl train continued the first one's checkpoint rather than starting again
    assert f"checkpoints/step_{killed_at:08d} at step {killed_at}\n" in (run.parent / "xl-L8-96K.train.log").read_text()
    table = json.loads((tmp_path / "results" / "xl-L8-96K.json").read_text())
    # as trained, then same_length at L, 2L, 4L, and 4L clamped at 2L (below 2L the clamp changes nothing)
    assert table["train"]["steps"] == 1500 and len(table["bpc"]) == 5
