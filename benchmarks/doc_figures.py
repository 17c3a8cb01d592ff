"""The figures README.md and docs/ quote, section by section, with the commands that measure them and when each
was last written, so that a change which moves a default knows which figures to measure again.

    python benchmarks/doc_figures.py                     # every section with figures
    python benchmarks/doc_figures.py --unsourced         # sections quoting figures without a command beside them
    python benchmarks/doc_figures.py --older-than REV    # figures last written before REV (a commit, tag or date)
    python benchmarks/doc_figures.py --json
    python benchmarks/doc_figures.py --untagged          # sections whose figures carry no "measured at" tag
    python benchmarks/doc_figures.py --write-tags        # add the missing tags (the commit that wrote the figures)

A *figure* is a measured quantity as the docs write them: a number with a unit of speed, time, size or quality
(``2,437 steps/s``, ``0.83 ms``, ``4.5x``, ``1.1983 bpc``, ``105%``, ``14 MB``) or a row of a table whose header
names one. A *command* is what the section shows to produce them: a ``python benchmarks/...``, ``txl ...`` or
``bash ...`` line in a code block or in backticks. *Written* is the commit (and its date) that last changed the
section's figure lines, from ``git blame``. A *tag* is the line under a section's figures naming the code they
were measured on, ``<sub>Measured at `COMMIT` (DATE).</sub>``: whoever measures again writes the commit the
work tree was at (``git rev-parse --short HEAD``); ``--write-tags`` gives a section without one the commit that
last wrote its figures. ``--older-than`` goes by the tag where there is one. A section holding the line
``<!-- not measured -->`` quotes settings, not figures, and is left out. Standard library and git only.
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
UNIT = (r"steps/s|steps per second|tokens/s|bytes/s|ms|µs|min|minutes|hours?|x|bpc|ppl|%|GiB|GB|MiB|MB|KB|"
        r"GB/s|FLOP/s|TFLOP/s|GFLOP/s")
# seconds only with a space ("46.8 s"): "90s" is a flag's value and "eight 5s" a count
FIGURE = re.compile(rf"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:\s?(?:{UNIT})| s)(?![\w/])")
HEADER_UNITS = re.compile(r"steps/s|per second|tokens/s|\bms\b|seconds|return|bpc|ppl|perplexity|speed|time|ratio",
                          re.I)
TAG = re.compile(r"^<sub>Measured at `([0-9a-f]{7,40})` \((\d{4}-\d{2}-\d{2})\)\.</sub>$")
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
    tag: Optional[str] = None  # the commit of the "measured at" line under the figures
    tag_date: Optional[str] = None
    end: int = 0  # the section's last line
    unmeasured: bool = False


def pages() -> List[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def sections(path: Path) -> List[Section]:
    """The page's sections (by ``#`` headings) with their figure lines and commands."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = [Section(str(path.relative_to(REPO)), 1, "(top)")]
    header_has_units, in_code = False, False
    for number, line in enumerate(lines, start=1):
        if not in_code and re.match(r"#{1,4} ", line):
            out.append(Section(out[0].page, number, line.lstrip("#").strip()))
            continue
        section = out[-1]
        section.end = number
        if line.startswith("```"):
            in_code = not in_code
            continue
        if not in_code and line.strip() == "<!-- not measured -->":  # the section's numbers are settings
            section.unmeasured = True
        tag = None if in_code else TAG.match(line)
        if tag:
            section.tag, section.tag_date = tag.group(1), tag.group(2)
            continue
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
    return [s for s in out if s.figure_lines and not s.unmeasured]


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
            stamps = [lines[n] for n in section.figure_lines if n in lines and lines[n][0].strip("0")]
            if stamps:
                commit, when = max(stamps, key=lambda s: s[1])
                section.written, section.written_date, section.written_time = commit[:10], _date(when), when
            found.append(section)
    return found


def tag_text(commit: str, date: str) -> str:
    return f"<sub>Measured at `{commit[:7]}` ({date}).</sub>"


def write_tags(found: List[Section]) -> List[Section]:
    """Give each section without a tag one under its figures, naming the commit that last wrote them; returns the
    sections tagged (a section whose figures are not committed yet is left for its author)."""
    done = []
    for page in dict.fromkeys(s.page for s in found if s.tag is None and s.written):  # pages that change only
        path = REPO / page
        lines = path.read_text(encoding="utf-8").splitlines()
        for s in sorted((s for s in found if s.page == page and s.tag is None and s.written), key=lambda s: -s.line):
            at = max(s.figure_lines)  # the paragraph or table holding the last figure ends at a blank line
            while at < s.end and lines[at].strip() and not lines[at].startswith(("```", "#")):
                at += 1
            lines[at:at] = ["", tag_text(s.written, s.written_date)] + ([""] if at < len(lines) and
                                                                           lines[at].strip() else [])
            s.tag, s.tag_date = s.written[:7], s.written_date
            done.append(s)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return done


def _date(stamp: int) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--unsourced", action="store_true", help="only sections with figures and no command")
    p.add_argument("--older-than", metavar="REV", help="only sections whose figures were all written before REV")
    p.add_argument("--untagged", action="store_true", help="only sections whose figures carry no tag")
    p.add_argument("--write-tags", action="store_true", help="tag the untagged sections' figures (then list them)")
    p.add_argument("--json", action="store_true", help="one JSON object per section")
    args = p.parse_args(argv)
    found = inventory()
    if args.write_tags:
        found = write_tags(found)
    if args.unsourced:
        found = [s for s in found if not s.commands]
    if args.untagged:
        found = [s for s in found if s.tag is None]
    if args.older_than:
        limit = commit_time(args.older_than)
        found = [s for s in found if (commit_time(s.tag) if s.tag else s.written_time if s.written else limit) < limit]
    if args.json:
        for s in found:
            print(json.dumps(asdict(s)))
        return 0
    print(f"{len(found)} sections, {sum(len(s.figure_lines) for s in found)} figure lines")
    print("| page:line | section | figure lines | e.g. | command | written | measured at |")
    print("|---|---|---|---|---|---|---|")
    for s in found:
        command = "; ".join(f"`{c}`" for c in s.commands[:2]) + (" ..." if len(s.commands) > 2 else "") or "—"
        print(f"| {s.page}:{s.line} | {s.title} | {len(s.figure_lines)} | {', '.join(s.examples)} | {command} | "
              f"{s.written or '—'} {s.written_date or ''} | {s.tag or '—'} {s.tag_date or ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
