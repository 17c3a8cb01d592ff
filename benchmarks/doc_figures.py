"""The figures README.md and docs/ quote, section by section, with the commands that measure them and when each
was last written, so that a change which moves a default knows which figures to measure again.

    python benchmarks/doc_figures.py                     # every section with figures
    python benchmarks/doc_figures.py --unsourced         # sections quoting figures without a command beside them
    python benchmarks/doc_figures.py --older-than REV    # figures last written before REV (a commit, tag or date)
    python benchmarks/doc_figures.py --json

A *figure* is a measured quantity as the docs write them: a number with a unit of speed, time, size or quality
(``2,437 steps/s``, ``0.83 ms``, ``4.5x``, ``1.1983 bpc``, ``105%``, ``14 MB``) or a row of a table whose header
names one. A *command* is what the section shows to produce them: a ``python benchmarks/...``, ``txl ...`` or
``bash ...`` line in a code block or in backticks. *Written* is the commit (and its date) that last changed the
section's figure lines, from ``git blame``. Standard library and git only.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
UNIT = (r"steps/s|steps per second|tokens/s|bytes/s|ms|µs|s|min|minutes|hours?|x|bpc|ppl|%|GiB|GB|MiB|MB|KB|"
        r"GB/s|FLOP/s|TFLOP/s|GFLOP/s")
FIGURE = re.compile(rf"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:{UNIT})(?![\w/])")
HEADER_UNITS = re.compile(r"steps/s|per second|tokens/s|\bms\b|seconds|return|bpc|ppl|perplexity|speed|time|ratio",
                          re.I)
COMMAND = re.compile(r"(?:^|`|\$ )((?:PYTHONPATH=\S+ )?(?:python3? (?:-m \S+ )?benchmarks/\S+|txl [a-z-]+|bash \S+)"
                     r"[^`\n]*)")


@dataclass
class Section:
    page: str
    line: int  # the heading's line
    title: str
    figure_lines: List[int] = field(default_factory=list)
    examples: List[str] = field(default_factory=list)
    commands: List[str] = field(default_factory=list)
    written: Optional[str] = None  # commit of the newest change to a figure line
    written_date: Optional[str] = None
    written_time: int = 0


def pages() -> List[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def sections(path: Path) -> List[Section]:
    """The page's sections (by ``#`` headings) with their figure lines and commands."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = [Section(str(path.relative_to(REPO)), 1, "(top)")]
    header_has_units, in_code = False, False
    for number, line in enumerate(lines, start=1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code and re.match(r"#{1,4} ", line):
            out.append(Section(out[0].page, number, line.lstrip("#").strip()))
            continue
        section = out[-1]
        for command in COMMAND.findall(line) if (in_code or "`" in line) else []:
            command = command.strip().rstrip("\\").strip()
            if command not in section.commands:
                section.commands.append(command)
        if in_code:
            continue
        if line.startswith("|"):
            if re.match(r"\|\s*:?-", line):
                continue
            if number < len(lines) and re.match(r"\|\s*:?-", lines[number]):  # a header: the separator follows
                header_has_units = bool(HEADER_UNITS.search(line))
                continue
            if header_has_units and re.search(r"\d", line):
                _add(section, number, line)
                continue
        if FIGURE.search(line):
            _add(section, number, line)
    return [s for s in out if s.figure_lines]


def _add(section: Section, number: int, line: str) -> None:
    section.figure_lines.append(number)
    if len(section.examples) < 2:
        found = FIGURE.search(line)
        section.examples.append(found.group(0) if found else line.strip()[:40])


def blame(path: Path) -> Dict[int, tuple]:
    """``{line: (commit, date)}`` of the page's last change to each line (empty outside a git work tree)."""
    try:
        text = subprocess.run(["git", "blame", "--line-porcelain", str(path)], cwd=REPO, capture_output=True,
                              text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    out, commit, final, dates = {}, None, None, {}
    for row in text.splitlines():
        head = re.match(r"^([0-9a-f]{40}) \d+ (\d+)", row)
        if head:
            commit, final = head.group(1), int(head.group(2))
        elif row.startswith("committer-time "):
            dates[commit] = int(row.split()[1])
        elif row.startswith("\t") and commit is not None:
            out[final] = (commit, dates.get(commit, 0))
    return out


def commit_time(rev: str) -> int:
    done = subprocess.run(["git", "log", "-1", "--format=%ct", rev], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"doc_figures: {rev}: not a commit, tag or date git knows")
    return int(done.stdout.strip())


def inventory() -> List[Section]:
    found = []
    for path in pages():
        lines = blame(path)
        for section in sections(path):
            stamps = [lines[n] for n in section.figure_lines if n in lines]
            if stamps:
                commit, when = max(stamps, key=lambda s: s[1])
                section.written, section.written_date, section.written_time = commit[:10], _date(when), when
            found.append(section)
    return found


def _date(stamp: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unsourced", action="store_true", help="only sections with figures and no command")
    p.add_argument("--older-than", metavar="REV", help="only sections whose figures were all written before REV")
    p.add_argument("--json", action="store_true", help="one JSON object per section")
    args = p.parse_args(argv)
    found = inventory()
    if args.unsourced:
        found = [s for s in found if not s.commands]
    if args.older_than:
        limit = commit_time(args.older_than)
        found = [s for s in found if s.written is not None and s.written_time < limit]
    if args.json:
        for s in found:
            print(json.dumps(asdict(s)))
        return 0
    print(f"{len(found)} sections, {sum(len(s.figure_lines) for s in found)} figure lines")
    print("| page:line | section | figure lines | e.g. | command | written |")
    print("|---|---|---|---|---|---|")
    for s in found:
        command = "; ".join(f"`{c}`" for c in s.commands[:2]) + (" ..." if len(s.commands) > 2 else "") or "—"
        print(f"| {s.page}:{s.line} | {s.title} | {len(s.figure_lines)} | {', '.join(s.examples)} | {command} | "
              f"{s.written or '—'} {s.written_date or ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
