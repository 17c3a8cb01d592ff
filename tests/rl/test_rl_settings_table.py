"""benchmarks/rl_settings.py's table, as its users print it: the return at the steps asked for (``--at``), the
mean ± standard error over seeds, "—" past a run's end, and the first step at a level."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rl_settings.py"


def curve(step_returns):
    return [{"step": s, "mean_return": r} for s, r in step_returns]


def write_runs(path: Path):
    runs = [
        # seed 1: 0.1 at 4096, 0.5 at 8192, 0.7 at 12288
        {"task": "T", "setting": "A", "seed": 1, "steps": 12288, "seconds": 2.0,
         "curve": curve([(4096, 0.1), (8192, 0.5), (12288, 0.7)])},
        {"task": "T", "setting": "A", "seed": 2, "steps": 12288, "seconds": 4.0,
         "curve": curve([(4096, 0.3), (8192, 0.7), (12288, 0.9)])},
        {"task": "T", "setting": "B", "seed": 1, "steps": 10000, "seconds": 1.0,
         "curve": curve([(4096, None), (8192, 0.2), (10000, 0.3)])},
        {"task": "T", "setting": "C", "seed": 1, "error": "stopped"},  # a failed run is left out
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))


def table(path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--table", str(path), *args], capture_output=True,
                          text=True, timeout=120)


def rows(out: str) -> dict:
    lines = [line.strip("|").split(" | ") for line in out.strip().splitlines()]
    return {cells[1]: cells for cells in lines[2:]}


def test_returns_at_the_steps_asked_for(tmp_path):
    runs = tmp_path / "runs.jsonl"
    write_runs(runs)
    done = table(runs, "--at", "4000", "9000", "12288", "--levels", "T=0.6")
    assert done.returncode == 0, done.stderr
    head = done.stdout.splitlines()[0]
    assert "return at 4k" in head and "return at 9k" in head and "return at 12k" in head
    got = rows(done.stdout)
    assert set(got) == {"A", "B"}
    # A: (0.1, 0.3) -> 0.20 ± 0.10; (0.5, 0.7) -> 0.60 ± 0.10; (0.7, 0.9) -> 0.80 ± 0.10
    assert got["A"][2:6] == ["2", "0.20 ± 0.10", "0.60 ± 0.10", "0.80 ± 0.10"]
    assert got["A"][6] == "10k (12k, 8k)"  # 0.6 first reached at 12288 and at 8192
    assert got["A"][7].strip() == f"{(12288 / 2 + 12288 / 4) / 2:,.0f}"
    # B: no return yet at 4096, 0.2 at 8192 (nearer 9000 than 10000), nothing past its end
    assert got["B"][3:6] == ["—", "0.20", "—"]
    assert got["B"][6] == "not yet (not yet)"


def test_default_steps_and_bad_levels(tmp_path):
    runs = tmp_path / "runs.jsonl"
    write_runs(runs)
    done = table(runs)
    assert done.returncode == 0, done.stderr
    assert "return at 50k | return at 100k | return at 200k" in done.stdout.splitlines()[0]
    bad = table(runs, "--levels", "T=high")
    assert bad.returncode != 0
    assert bad.stderr.strip().splitlines() == ["--levels: expected TASK=RETURN, got 'T=high'"]
