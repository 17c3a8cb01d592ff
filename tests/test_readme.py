"""The README as a newcomer reads it, and the documentation it leads to.

* It fits its budget, and it and every page of docs/ speak of the software only: never of issues, rounds or
  sessions (words in code, such as a benchmark's ``--rounds`` flag, are code).
* It has exactly two commands for a fresh machine: one installs and runs the main job, one is the test install
  (``[dev]``) and runs the tests; ``.ci/run`` runs that second line as written.
* Its tour runs as written, command after command, and prints what the README shows (numbers aside). Its Python
  blocks, the backbone example's printed claim among them, run in tests/test_as_users_run.py, each in a fresh
  process, with 1 and 2 threads.
* Every link of the README and of docs/ leads to a file, and every ``#anchor`` to a heading.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from data_fixtures import data_root, require

import transformer_xl

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
SRC = Path(transformer_xl.__file__).resolve().parents[1]

#: The README's size: what the project is, the two commands, the tour, the migration, the two newest features.
BUDGET = 260
FORBIDDEN = re.compile(r"\b(issues?|rounds?|sessions?)\b", re.I)


def prose(text: str) -> str:
    """The text without its code: fenced blocks (lines kept, emptied) and inline code spans."""
    text = re.sub(r"^```.*?^```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def block(name: str, text: str = "") -> str:
    """The fenced block of the README between ``<!-- name -->`` and ``<!-- /name -->`` (its lines, unfenced)."""
    found = re.search(rf"<!-- {name} -->\n(.*?)<!-- /{name} -->", text or README.read_text(encoding="utf-8"), re.S)
    assert found, f"README: no {name} block"
    return found.group(1)


def fenced(text: str, language: str) -> list:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


# ---------------------------------------------------------------------------- size and words
def test_the_readme_fits_its_budget():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= BUDGET, f"README.md has {n} lines, more than {BUDGET}: move reference material into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name if p == README else f"docs/{p.name}")
def test_the_documentation_speaks_of_the_software_only(page):
    found = [f"{page.name}:{n}: {line.strip()}" for n, line in enumerate(prose(page.read_text(encoding="utf-8"))
                                                                        .splitlines(), 1) if FORBIDDEN.search(line)]
    assert not found, "\n".join(found)


def test_the_word_check_sees_prose_and_not_code():
    assert FORBIDDEN.search(prose("The issue's target is met.")) and FORBIDDEN.search(prose("Last round ended"))
    assert not FORBIDDEN.search(prose("run `bench.py --rounds 5` and `round(p)`\n```\nsession = 1\n```\n"))


# ---------------------------------------------------------------------------- the two commands
def test_two_commands_for_a_fresh_machine_and_ci_runs_the_second():
    text = README.read_text(encoding="utf-8")
    section = text.split("## Two commands on a fresh machine", 1)[1].split("\n## ", 1)[0]
    commands = [b.strip() for b in fenced(section, "bash")]
    assert len(commands) == 2 and all("\n" not in c for c in commands), commands
    run, test = commands
    assert run.startswith("python3 -m venv .venv && ") and run.endswith(" && txl train"), run
    assert '-e ".[dev]"' in test and "-q" not in test.split(), test
    assert test.endswith(" && python -m pytest -n 2 --dist loadfile"), test
    assert "test install, `[dev]`" in section and "has no pytest" in section
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test in ci, ".ci/run must run the README's test line as written"


def test_lm_eval_tasks_are_written_into_a_run_folder_that_git_ignores():
    ignored = {line.strip() for line in (REPO / ".gitignore").read_text().splitlines()}
    calls = [m for page in PAGES for m in re.findall(r"write_wikitext_task as w; w\('([^']+)'", page.read_text())]
    assert calls, "no write_wikitext_task example found"
    for folder in calls:
        assert folder.split("/")[0] + "/" in ignored, f"{folder} would be left untracked in the clone"


# ---------------------------------------------------------------------------- links
def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation other than ``-`` and ``_`` dropped, spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name if p == README else f"docs/{p.name}")
def test_every_link_leads_somewhere(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            broken.append(target)
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


# ---------------------------------------------------------------------------- what runs
def masked(line: str) -> str:
    """A line with its numbers and its spacing taken out (what differs from machine to machine)."""
    return re.sub(r"\s+", "", re.sub(r"-?\d[\d,]*(\.\d+)?(e[-+]?\d+)?", "#", line))


def shown_commands(console: str) -> list:
    """``[(command, [lines shown after it])]`` of a console block (``$ `` starts a command)."""
    out = []
    for line in console.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and line.strip():
            out[-1][1].append(line)
    return out


def test_the_tour_runs_as_written(tmp_path, shared_cache):
    """Each command of the tour, in a fresh folder beside ``../shared/data``, exits 0 and prints what the README
    shows after it (numbers and spacing aside; not the sampled text, the progress bars or the cache's path)."""
    require("wikitext-2/test.txt")
    (tmp_path / "shared").symlink_to(data_root().resolve().parent)
    work = tmp_path / "clone"
    work.mkdir()
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "TXL_CACHE_DIR": str(shared_cache), "TXL_DEBUG": "", "HF_HUB_OFFLINE": "1"}
    console = fenced(block("tour"), "console")
    assert len(console) == 1
    commands = shown_commands(console[0])
    names = [c.split()[1] for c, _ in commands if c.startswith("txl ")]
    assert names == ["train", "generate", "score", "eval", "export", "lm-eval"], names
    for command, shown in commands:
        done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                              timeout=1800)
        assert done.returncode == 0, f"$ {command}\n{done.stderr[-3000:]}"
        printed = {masked(line) for line in (done.stdout + "\n" + done.stderr).replace("\r", "\n").splitlines()}
        if command.startswith("txl generate"):
            prompt = re.search(r'--prompt "([^"]*)"', command).group(1)
            assert done.stdout.startswith(prompt), done.stdout
            continue
        missing = [line for line in shown if masked(line) not in printed and "█" not in line
                   and not line.startswith("preparing corpus")]
        assert not missing, f"$ {command}\nshown but not printed: {missing}\nprinted:\n{done.stdout}{done.stderr}"
