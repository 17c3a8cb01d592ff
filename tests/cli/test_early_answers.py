"""A mistyped folder is answered before torch loads, in the words the command itself uses.

``src/transformer_xl/cli/arguments.json`` is what the early reading knows of each sub-command's arguments; it is
written from the parser (``python tests/cli/test_early_answers.py --write``) and must equal it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformer_xl.cli import early
from transformer_xl.cli.app import build_parser

SPEC = Path(early.__file__).with_name(early.SPEC_NAME)


def spec_from_parser() -> dict:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name in sorted(early.MODEL_FIRST + early.AGENT_FIRST):
        options, positional = {}, []
        for action in sub.choices[name]._actions:
            nargs = 1 if action.nargs is None else action.nargs
            if action.option_strings:
                options.update({flag: nargs for flag in action.option_strings})
            else:
                positional.append(nargs)
        out[name] = {"options": dict(sorted(options.items())), "positionals": positional}
    return out


def test_the_early_reading_knows_the_arguments_the_parser_has():
    assert json.loads(SPEC.read_text(encoding="utf-8")) == spec_from_parser(), \
        "the parser changed: python tests/cli/test_early_answers.py --write"


@pytest.fixture()
def folders(tmp_path):
    (tmp_path / "runs" / "default").mkdir(parents=True)
    (tmp_path / "runs" / "rl1" / "agent").mkdir(parents=True)
    (tmp_path / "runs" / "rl1" / "agent" / "agent.json").write_text("{}")
    return tmp_path


CASES = [
    (["generate", "runs/defualt", "--prompt", "hi"], "no such folder runs/defualt (did you mean runs/default?)"),
    (["generate", "--prompt", "hi", "--max-new-tokens", "5", "runs/defualt"], "no such folder runs/defualt"),
    (["eval", "runs/defualt", "--mem-len", "64"], "no such folder runs/defualt (did you mean runs/default?)"),
    (["score", "runs/defualt", "f.txt"], "no such folder runs/defualt (did you mean runs/default?)"),
    (["export", "runs/defualt", "out.onnx"], "no such folder runs/defualt (did you mean runs/default?)"),
    (["convert", "runs/defualt", "out", "--from", "hf"], "no such folder runs/defualt (did you mean runs/default?)"),
    (["rl-eval", "runs/rl2"], "runs/rl2: no such folder; did you mean runs/rl1? Or give the --run-dir of a txl rl "
                              "run, or its agent/ folder"),
]


@pytest.mark.parametrize("argv,words", CASES, ids=[" ".join(c[0][:2]) for c in CASES])
def test_a_missing_folder_is_answered_early_as_the_command_answers_it(folders, argv, words, monkeypatch):
    monkeypatch.chdir(folders)
    line = early.answer(argv)
    assert line == f"txl {argv[0]}: error: {words}" or (line or "").startswith(f"txl {argv[0]}: error: {words}")


@pytest.mark.parametrize("argv", [["generate", "runs/default", "--prompt", "hi"],  # exists: the command decides
                                  ["generate", "org/model", "--prompt", "hi"],  # a hub id
                                  ["convert", "runs/defualt", "out", "--from", "original"],  # config first
                                  ["eval", "--no-such-flag", "runs/defualt"],  # argparse speaks
                                  ["generate", "-h"], ["train", "runs/defualt"], ["-v", "eval", "runs/defualt"], []])
def test_everything_else_is_left_to_the_command(folders, argv, monkeypatch):
    monkeypatch.chdir(folders)
    assert early.answer(argv) is None


def test_the_early_answer_is_the_commands_own_and_comes_without_torch(folders):
    """In a fresh process: the line, exit status 2 and no torch imported; the same line as the command gives
    when the early reading is bypassed (it names the folder through the same function)."""
    code = ("import sys\nfrom transformer_xl.cli import main\nstatus = main(sys.argv[1:])\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\nsys.exit(status)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, "generate", "runs/defualt", "--prompt", "hi"],
                          cwd=folders, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == "txl generate: error: no such folder runs/defualt (did you mean runs/default?)"
    late = ("import sys\nfrom transformer_xl.cli import app\nsys.exit(app.main(sys.argv[1:]))\n")
    full = subprocess.run([sys.executable, "-c", late, "generate", "runs/defualt", "--prompt", "hi"],
                          cwd=folders, capture_output=True, text=True, timeout=120)
    assert full.returncode == 2 and full.stderr.strip() == done.stderr.strip()
    assert seconds < 30  # the figure (under 3 s on 2 cores) is benchmarks/command_overhead.py's


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SPEC.write_text(json.dumps(spec_from_parser(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {SPEC.relative_to(Path.cwd()) if SPEC.is_relative_to(Path.cwd()) else SPEC}")
    os._exit(0)
