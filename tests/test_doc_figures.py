"""benchmarks/doc_figures.py: the figures the docs quote, found with the commands beside them and when they were
written (git blame)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "doc_figures.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_each_section_with_figures_is_listed_with_its_commands():
    done = run("--json")
    assert done.returncode == 0, done.stderr
    found = [json.loads(line) for line in done.stdout.splitlines()]
    by_title = {(s["page"], s["title"]): s for s in found}
    torchrl = by_title[("docs/RL.md", "TorchRL: `TransformerXLModule`")]
    assert len(torchrl["figure_lines"]) >= 6  # the table's six rows at least
    assert any("benchmarks/torchrl_ppo_table.py" in c for c in torchrl["commands"])
    speed = by_title[("docs/COMMANDS.md", "What every command shares")]
    assert any("benchmarks/typo_answer.py" in c for c in speed["commands"])
    assert all(s["figure_lines"] for s in found)
    lines = (REPO / "docs" / "RL.md").read_text(encoding="utf-8").splitlines()
    assert all("|" in lines[n - 1] or any(ch.isdigit() for ch in lines[n - 1]) for n in torchrl["figure_lines"])


def test_unsourced_and_older_than_narrow_the_list():
    every = [json.loads(line) for line in run("--json").stdout.splitlines()]
    unsourced = [json.loads(line) for line in run("--json", "--unsourced").stdout.splitlines()]
    assert unsourced and all(not s["commands"] for s in unsourced) and len(unsourced) < len(every)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode != 0:  # not a git work tree: nothing to date the figures by
        return
    older = [json.loads(line) for line in run("--json", "--older-than", "HEAD").stdout.splitlines()]
    assert all(s["written"] for s in older) and len(older) <= len(every)
    bad = run("--older-than", "no-such-rev")
    assert bad.returncode != 0 and "not a commit" in bad.stderr
