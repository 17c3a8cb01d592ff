"""Mutation testing of the core: small changes to the source (mutants), each run against the tests that claim the
module; a mutant the tests do not notice (it survives) is a property nothing checks.

Mutants are made by mutmut's own operators (``mutmut.mutation.mutators``: ``+`` to ``-``, ``<`` to ``<=``,
``True`` to ``False``, a number plus one, an argument dropped, an assignment to ``None`` ...), one change each,
inside the functions of a target module. What this script adds to mutmut is the per-module test subset and the
time budget: mutmut 3 maps tests to mutants with a coverage run of its whole test directory and runs its mutants
through trampolines in the code (which ``torch.export`` and decorated functions do not run as written); here each
target names the few test files that claim its module.

How a mutant runs:

* once per target, its test files run on a clean copy of the package under coverage, with every test's node id
  as the coverage context: which test runs which line, and how long each test takes;
* a mutant runs only the tests that ran its line (for a changed default value, its function's first line), fastest
  first, as many as took ``--test-seconds`` in the clean run, as ``pytest -x``;
* it runs in a child forked from this process, which imported torch, pytest and the clean package once: the child
  swaps the mutated function's code object into the live function (every import of it, bound method and
  registered callback then runs the mutant); where that cannot be done (a default value, a class body) the child
  imports the package afresh. The mutated file is also written to the copy, for the tests' own subprocesses;
* killed when a test fails or errors, survived when they pass, ``timeout`` (counted as killed, as mutmut does)
  past ``--timeout-factor`` times its tests' clean time plus 15 s. A line no test of the target runs is
  ``uncovered`` (not run; counted as survived).

Left alone: docstrings, type annotations, imports, decorators, ``raise`` statements (their messages are judged by
the bad-input tests), logging calls, a line ending in ``# pragma: no mutate``, and ``device=`` arguments (on the CPU
every device is the default one: such a mutant is equivalent wherever this runs). Of mutmut's two argument mutants
(an argument dropped, or replaced by ``None``) only the first is made for calls of several arguments: ``None`` there
only makes the call raise.

    python benchmarks/mutation.py --list                      # the targets, their mutant counts and tests
    python benchmarks/mutation.py --target memory --target visibility --json out.json
    python benchmarks/mutation.py --budget-min 80 --json benchmarks/results/mutation.json
    python benchmarks/mutation.py --target memory --show 12   # the diff of one mutant

One mutant at a time (the tests use the cores); ``--budget-min`` stops starting new mutants when spent (the rest are
reported as not run). The summary is a Markdown table of killed / total per target and the mutants not killed,
with their line (docs/MUTATION.md: the numbers, and why each survivor is equivalent). mutmut's operators are
imported from its package (``mutmut>=3.8,<3.9`` in the ``dev`` extra: where they live is not mutmut's public
interface).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import hashlib
import importlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "transformer_xl"


@dataclasses.dataclass(frozen=True)
class Target:
    """A module of the core, the functions of it that are mutated (None: all), and the tests that claim it."""

    name: str
    path: str  # relative to src/transformer_xl
    tests: Tuple[str, ...]  # pytest arguments: files, node ids, -k expressions
    functions: Optional[Tuple[str, ...]] = None  # "function" or "Class.method"; None = every function


#: The core. Test files are listed fastest and most telling first: ``-x`` stops at the first failure.
TARGETS = [
    Target("relative", "model/attention/relative.py",
           ("tests/model/test_core_properties.py", "tests/model/test_attention_score.py",
            "tests/model/test_reference_equivalence.py")),
    Target("visibility", "model/attention/visibility.py",
           ("tests/model/test_visibility.py", "tests/model/test_attention_score.py",
            "tests/model/test_core_properties.py", "tests/model/test_memory_reset.py",
            "tests/model/test_backbone.py", "tests/model/test_backends.py")),
    Target("plain-attention", "model/attention/backends.py",
           ("tests/model/test_core_properties.py", "tests/model/test_attention_score.py",
            "tests/model/test_backends.py"),
           functions=("masked_softmax_attend", "plain_attention")),
    Target("memory", "model/memory.py",
           ("tests/model/test_memory_unit.py", "tests/model/test_recurrence.py", "tests/model/test_memory_reset.py",
            "tests/model/test_gradients.py", "tests/model/test_core_properties.py",
            "tests/model/test_backbone.py")),
    Target("adaptive", "model/adaptive.py",
           ("tests/model/test_adaptive.py", "tests/model/test_gradients.py",
            "tests/model/test_reference_equivalence.py")),
    Target("decoding-cache", "model/kv_cache.py",
           ("tests/generation/test_decoding_cache.py", "tests/generation/test_generation.py",
            "tests/model/test_backbone.py", "tests/model/test_backends.py")),
    Target("eval-segments", "evaluation/segments.py",
           ("tests/evaluation/test_segment_loop.py", "tests/evaluation/test_sliding_eval.py")),
    Target("eval-loop", "evaluation/evaluate.py",
           ("tests/evaluation/test_segment_loop.py", "tests/evaluation/test_sliding_eval.py"),
           functions=("evaluate", "_segment_losses")),
    Target("export-graph", "export/graph.py",
           ("tests/export/test_graph_eager.py",
            "tests/export/test_export.py::test_graph_gives_the_eager_log_probs[word-3tails-div2.pt2-3 segments of "
            "tgt_len, batch 2]",
            "tests/export/test_export.py::test_graph_gives_the_eager_log_probs[mem-init-zeros-sliding.pt2-3 segments "
            "of tgt_len, batch 2]",
            "tests/export/test_export.py::test_starts_input_runs_to_eager_numbers[.pt2]")),
    Target("export-decode", "export/decode.py",
           ("tests/export/test_graph_eager.py",
            "tests/export/test_export.py::test_decoding_graph_steps_give_generates_log_probs_and_tokens"
            "[word-3tails-div2.pt2]",
            "tests/export/test_export.py::test_decoding_graph_steps_give_generates_log_probs_and_tokens"
            "[mem-init-zeros-sliding.pt2]")),
    Target("checkpointer", "training/checkpointer.py",
           ("tests/training/test_checkpoint_round_trip.py", "tests/training/test_run_safety.py")),
    Target("checkpoint-files", "training/checkpoint_files.py",
           ("tests/training/test_checkpoint_round_trip.py", "tests/training/test_run_safety.py"),
           functions=("optimizer_to_safe", "optimizer_from_safe", "rng_state", "set_rng_state", "mems_to_tensors",
                      "_global_mems", "mems_from_tensors", "save_checkpoint", "_write_checkpoint_dir",
                      "load_training_state")),
]


# ---------------------------------------------------------------------------------------------- making mutants
@dataclasses.dataclass
class Mutant:
    number: int
    line: int
    function: str
    before: str  # the first changed line, as written
    after: str  # the same line, mutated
    code: str  # the whole mutated module
    operator: str = ""  # mutmut's operator that made it
    body_line: int = 0  # the first statement of the function it is in (after its docstring)

    def key(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:12]


def make_mutants(source: str, functions: Optional[Sequence[str]] = None) -> List[Mutant]:
    """Every mutant mutmut's operators make of the code inside the functions of ``source`` (module docstring for
    what is left alone), one change each, duplicates (the same resulting code) dropped."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider
    from mutmut.mutation.mutators import mutation_operators

    wrapper = MetadataWrapper(cst.parse_module(source))
    lines = source.splitlines()
    ignored = {i + 1 for i, text in enumerate(lines) if text.rstrip().endswith("# pragma: no mutate")}
    found: List[Tuple[object, object, int, str, str, int]] = []

    class Collect(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider,)

        def __init__(self):
            super().__init__()
            self.scope: List[Tuple[str, bool, int]] = []  # (name, is a function, first line of its body)

        def qualname(self) -> str:
            return ".".join(name for name, _, _ in self.scope)

        def in_function(self) -> bool:
            return any(is_fn for _, is_fn, _ in self.scope)

        def selected(self) -> bool:
            if not self.in_function():
                return False
            name = self.qualname()
            return functions is None or any(name == f or name.startswith(f + ".") for f in functions)

        def on_visit(self, node) -> bool:
            if isinstance(node, (cst.ClassDef, cst.FunctionDef)):
                body = node.body.body[0] if isinstance(node.body, cst.IndentedBlock) else node.body
                if _is_docstring(body) and len(node.body.body) > 1:  # coverage records no line of a docstring
                    body = node.body.body[1]
                self.scope.append((node.name.value, isinstance(node, cst.FunctionDef),
                                   self.get_metadata(PositionProvider, body).start.line))
                return True
            if isinstance(node, (cst.Decorator, cst.Annotation, cst.Import, cst.ImportFrom, cst.Raise)):
                return False
            if _is_docstring(node):
                return False
            if isinstance(node, cst.Call) and _is_logging(node):
                return False
            if self.selected():
                line = self.get_metadata(PositionProvider, node).start.line
                if line not in ignored:
                    for kind, operator in mutation_operators:
                        if isinstance(node, kind):
                            for mutated in operator(node):
                                if operator.__name__ == "operator_arg_removal" and not _keep_arg_mutant(node, mutated):
                                    continue
                                body_line = [b for _, is_fn, b in self.scope if is_fn][-1]
                                found.append((node, mutated, line, self.qualname(), operator.__name__, body_line))
            return True

        def on_leave(self, original_node) -> None:
            if isinstance(original_node, (cst.ClassDef, cst.FunctionDef)):
                self.scope.pop()

    wrapper.visit(Collect())
    mutants, seen = [], {source}
    for node, mutated, line, qualname, operator, body_line in found:
        code = wrapper.module.deep_replace(node, mutated).code
        if code in seen:
            continue
        seen.add(code)
        before, after = _changed_line(source, code)
        mutants.append(Mutant(len(mutants) + 1, line, qualname, before, after, code, operator, body_line))
    return mutants


def _keep_arg_mutant(call, mutated) -> bool:
    """Of mutmut's argument mutants keep, for a call of several arguments, the ones that drop an argument (an
    argument replaced by ``None`` there only makes the call raise, which any test notices); for a call of one, its
    replacement by ``None``. Never a change of a ``device=`` argument: on the CPU every device is the default one,
    so such a mutant is equivalent wherever the mutation run can run."""
    before = {a.keyword.value for a in call.args if a.keyword}
    after = {a.keyword.value for a in mutated.args if a.keyword}
    if "device" in before and "device" not in after:
        return False
    if len(call.args) > 1 and len(mutated.args) == len(call.args):
        return False
    if len(call.args) == 1 and call.args[0].keyword is not None and call.args[0].keyword.value == "device":
        return False
    return True


def _is_docstring(node) -> bool:
    import libcst as cst

    return (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1 and isinstance(node.body[0], cst.Expr)
            and isinstance(node.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _is_logging(node) -> bool:
    import libcst as cst

    func = node.func
    return isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value in (
        "log", "logger", "logging", "warnings")


def _changed_line(old: str, new: str) -> Tuple[str, str]:
    a, b = old.splitlines(), new.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            return " ".join(x.strip() for x in a[i1:i2]), " ".join(x.strip() for x in b[j1:j2])
    return "", ""


# ---------------------------------------------------------------------------------------------- running them
class Sandbox:
    """A copy of the package that one module at a time is mutated in."""

    def __init__(self, root: Path):
        self.root = root
        self.src = root / "src"
        shutil.copytree(PACKAGE, self.src / "transformer_xl", ignore=shutil.ignore_patterns("__pycache__"))

    def write(self, relpath: str, code: str) -> None:
        path = self.src / "transformer_xl" / relpath
        for stale in (path.parent / "__pycache__").glob(path.stem + ".*.pyc"):
            stale.unlink()  # the bytecode of the previous version (its mtime may fall in the same second)
        path.write_text(code, encoding="utf-8")


def run_tests(sandbox: Sandbox, tests: Sequence[str], timeout: float, log: Path,
              coverage_of: Optional[Path] = None, prepare=None) -> Tuple[str, float, Optional[dict]]:
    """``("passed" | "failed" | "timeout", seconds, measured)``: the tests in a forked child. With ``coverage_of``,
    ``measured`` says which test (node id) ran which line of that file (``lines``; the empty name: code run while
    collecting), how long each test took (``seconds``) and their order (``order``)."""
    import pytest

    measured_file = log.with_suffix(".measured.json")
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 99
        try:
            os.setpgid(0, 0)  # its own process group: a timeout ends the tests' own subprocesses too
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            if prepare is not None:
                prepare()
            cov = None
            if coverage_of is not None:
                import coverage

                cov = coverage.Coverage(include=[str(coverage_of)], data_file=None)
                cov.start()

            class PerTest:
                seconds: Dict[str, float] = {}

                @pytest.hookimpl(hookwrapper=True)
                def pytest_runtest_protocol(self, item, nextitem):
                    if cov is not None:
                        cov.switch_context(item.nodeid)
                    began = time.monotonic()
                    yield
                    self.seconds[item.nodeid] = round(time.monotonic() - began, 3)

            per_test = PerTest()
            code = int(pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "--no-header",
                                    "-o", "addopts=", *tests], plugins=[per_test]))
            if cov is not None:
                cov.stop()
                by_line = cov.get_data().contexts_by_lineno(str(coverage_of))
                measured_file.write_text(json.dumps({"lines": {str(k): sorted(v) for k, v in by_line.items()},
                                                     "seconds": per_test.seconds,
                                                     "order": list(per_test.seconds)}))
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() - start > timeout:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - start, None
        time.sleep(0.02)
    seconds = time.monotonic() - start
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    measured = json.loads(measured_file.read_text()) if coverage_of is not None and measured_file.exists() else None
    return ("passed" if code == 0 else "failed"), seconds, measured


def _code_objects(code, out: Dict[str, object]) -> Dict[str, object]:
    """Every function's code object compiled into ``code``, by qualified name (``Class.method``, ``f.<locals>.g``)."""
    import types

    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out[const.co_qualname] = const
            _code_objects(const, out)
    return out


def _live_functions(module) -> Dict[str, object]:
    """The function objects of ``module`` (decorated ones unwrapped; methods, static and class methods, properties),
    by the qualified name of their code."""
    import inspect

    found: Dict[str, object] = {}

    def add(obj) -> None:
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        if isinstance(obj, property):
            for part in (obj.fget, obj.fset, obj.fdel):
                if part is not None:
                    add(part)
            return
        if callable(obj) and not isinstance(obj, type):
            fn = inspect.unwrap(obj)
            code = getattr(fn, "__code__", None)
            if code is not None and fn.__module__ == module.__name__:
                found[code.co_qualname] = fn

    def walk(namespace) -> None:
        for value in list(vars(namespace).values()):
            if isinstance(value, type) and value.__module__ == module.__name__ and value is not namespace:
                walk(value)
            else:
                add(value)

    walk(module)
    return found


def patch_in_place(module, clean: str, mutated: str) -> bool:
    """Give the already imported ``module`` the mutant's code: the code object of every function the mutant
    changed is swapped into the live function object, so that every reference to it (imports by name, bound
    methods, registered callbacks) runs the mutant. False where that cannot be done (a default value or a closure
    changed, or the function is not reachable): the caller imports the package afresh instead."""
    before = _code_objects(compile(clean, module.__file__, "exec"), {})
    after = _code_objects(compile(mutated, module.__file__, "exec"), {})
    if set(before) != set(after):
        return False
    changed = [q for q in after if after[q] != before[q]]
    outer = [q for q in changed if not any(q.startswith(o + ".<locals>.") for o in changed if o != q)]
    live = _live_functions(module)
    if not outer or any(q not in live for q in outer):
        return False
    try:
        for q in outer:
            live[q].__code__ = after[q]
    except ValueError:  # another number of free variables
        return False
    return True


def fresh_import() -> None:
    """Forget the package, so that the tests import it again (the mutant from the sandbox's copy)."""
    for name in [n for n in sys.modules if n == "transformer_xl" or n.startswith("transformer_xl.")]:
        del sys.modules[name]


def tests_of_line(measured: dict, line: int, seconds: float = float("inf")) -> List[str]:
    """The tests that ran ``line`` in the clean run (every test when collection ran it), fastest first, as many as
    fit in ``seconds`` of the clean run's time (at least one)."""
    names = measured["lines"].get(str(line), [])
    chosen = measured["order"] if "" in names else [n for n in measured["order"] if n in names]
    chosen = sorted(chosen, key=lambda n: measured["seconds"][n])
    out, spent = [], 0.0
    for name in chosen:
        spent += measured["seconds"][name]
        if out and spent > seconds:
            break
        out.append(name)
    return out


def first_failure(log: Path) -> str:
    """The first test pytest names as failed or in error (``FAILED tests/...::name``), or the log's last line."""
    text = log.read_text(errors="replace") if log.exists() else ""
    match = re.search(r"^(?:FAILED|ERROR) (\S+)", text, re.M)
    if match:
        return match.group(1)
    tail = [line for line in text.splitlines() if line.strip()]
    return tail[-1][:120] if tail else "?"


def existing(tests: Sequence[str]) -> List[str]:
    """The pytest arguments whose file exists (a file added later is left out of an earlier measurement)."""
    out, skip_next = [], False
    for arg in tests:
        if skip_next:
            out.append(arg)
            skip_next = False
        elif arg.startswith("-"):
            out.append(arg)
            skip_next = arg in ("-k", "-m")
        elif (REPO / arg.split("::")[0]).exists():
            out.append(arg)
    return out


def mutate_target(target: Target, sandbox: Sandbox, deadline: float, timeout_factor: float, work: Path,
                  only: Optional[Sequence[int]] = None, test_seconds: float = 10.0) -> dict:
    source = (PACKAGE / target.path).read_text(encoding="utf-8")
    mutants = make_mutants(source, target.functions)
    if only:
        mutants = [m for m in mutants if m.number in only]
    tests = existing(target.tests)
    result = {"target": target.name, "path": target.path, "tests": tests, "mutants": [], "clean_seconds": None}
    sandbox.write(target.path, source)
    module = importlib.import_module("transformer_xl." + target.path[:-3].replace("/", "."))
    assert module.__file__.startswith(str(sandbox.src)), module.__file__
    status, clean, measured = run_tests(sandbox, tests, 1800, work / f"{target.name}-clean.log",
                                        coverage_of=sandbox.src / "transformer_xl" / target.path)
    if status != "passed" or measured is None:
        raise SystemExit(f"{target.name}: the tests fail on the clean code; see {work / (target.name + '-clean.log')}")
    result["clean_seconds"] = round(clean, 1)
    print(f"## {target.name} ({target.path}): {len(mutants)} mutants, {len(measured['order'])} tests, clean run "
          f"{clean:.1f} s", flush=True)
    for m in mutants:
        entry = {"number": m.number, "line": m.line, "function": m.function, "before": m.before, "after": m.after}
        chosen = (tests_of_line(measured, m.line, test_seconds)
                  or tests_of_line(measured, m.body_line, test_seconds))  # (a default value)
        if not chosen:
            entry.update(status="uncovered")
        elif time.monotonic() > deadline:
            entry.update(status="not run")
        else:
            sandbox.write(target.path, m.code)  # for the tests' own subprocesses, and a fresh import
            log = work / f"{target.name}-{m.number}.log"
            timeout = 15.0 + timeout_factor * sum(measured["seconds"][n] for n in chosen)

            def prepare(code=m.code) -> None:
                if not patch_in_place(module, source, code):
                    fresh_import()

            status, seconds, _ = run_tests(sandbox, chosen, timeout, log, prepare=prepare)
            entry.update(status={"failed": "killed", "passed": "survived", "timeout": "timeout"}[status],
                         seconds=round(seconds, 1), tests=len(chosen))
            if status == "failed":
                entry["by"] = first_failure(log)
            log.unlink(missing_ok=True)
        result["mutants"].append(entry)
        mark = {"killed": ".", "timeout": "T", "survived": "S", "uncovered": "u", "not run": "-"}[entry["status"]]
        print(mark, end="", flush=True)
    sandbox.write(target.path, source)
    print(flush=True)
    return result


# ---------------------------------------------------------------------------------------------- reporting
def counts(result: dict) -> Dict[str, int]:
    out = {"killed": 0, "timeout": 0, "survived": 0, "uncovered": 0, "not run": 0}
    for m in result["mutants"]:
        out[m["status"]] += 1
    return out


def summary(results: Sequence[dict]) -> str:
    from common import markdown_table  # beside this script; here, not above: it imports torch

    rows = []
    total_killed = total_run = 0
    for r in results:
        c = counts(r)
        killed = c["killed"] + c["timeout"]
        judged = killed + c["survived"] + c["uncovered"]
        total_killed, total_run = total_killed + killed, total_run + judged
        rate = f"{100 * killed / judged:.1f}%" if judged else "-"
        rows.append([r["target"], f"`{r['path']}`", len(r["mutants"]), killed, c["survived"], c["uncovered"],
                     c["not run"], rate])
    if total_run:
        rows.append(["**core**", "", "", total_killed, "", "", "", f"**{100 * total_killed / total_run:.1f}%**"])
    head = ["target", "module", "mutants", "killed", "survived", "uncovered", "not run", "kill rate"]
    lines = [markdown_table(head, rows), ""]
    for r in results:
        left = [m for m in r["mutants"] if m["status"] in ("survived", "uncovered")]
        if left:
            lines.append(f"{r['target']} ({r['path']}), not killed:")
            lines += [f"- #{m['number']} line {m['line']} in `{m['function']}` ({m['status']}): `{m['before']}` -> "
                      f"`{m['after']}`" for m in left]
            lines.append("")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", help="a target's name (default: all); repeatable")
    parser.add_argument("--mutant", type=int, action="append", help="only these mutant numbers (with one --target)")
    parser.add_argument("--list", action="store_true", help="list the targets and their mutant counts")
    parser.add_argument("--show", type=int, help="print the diff of one mutant (with one --target)")
    parser.add_argument("--budget-min", type=float, default=90.0, help="stop starting mutants after this (minutes)")
    parser.add_argument("--timeout-factor", type=float, default=3.0, help="a mutant's limit / its tests' time")
    parser.add_argument("--test-seconds", type=float, default=10.0,
                        help="a mutant runs the fastest tests of its line that took this long in the clean run")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    by_name = {t.name: t for t in TARGETS}
    unknown = [n for n in args.target or [] if n not in by_name]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    targets = [by_name[n] for n in args.target] if args.target else TARGETS
    if args.list:
        for t in targets:
            n = len(make_mutants((PACKAGE / t.path).read_text(encoding="utf-8"), t.functions))
            print(f"{t.name:18s} {t.path:36s} {n:4d} mutants   tests: {' '.join(existing(t.tests))}")
        return 0
    if args.show is not None:
        if len(targets) != 1:
            parser.error("--show needs one --target")
        t = targets[0]
        source = (PACKAGE / t.path).read_text(encoding="utf-8")
        (m,) = [m for m in make_mutants(source, t.functions) if m.number == args.show]
        sys.stdout.writelines(difflib.unified_diff(source.splitlines(True), m.code.splitlines(True),
                                                   f"a/{t.path}", f"b/{t.path}"))
        return 0
    sys.dont_write_bytecode = False  # the children read the bytecode of tests (pytest's rewrite) written once
    import numpy  # noqa: F401  (imported once here, not in every child)
    import pytest  # noqa: F401
    import torch  # noqa: F401

    deadline = time.monotonic() + 60 * args.budget_min
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="txl-mutation-") as tmp:
        sandbox = Sandbox(Path(tmp))
        sys.path.insert(0, str(sandbox.src))  # this process imports the clean copy once; children patch it
        os.environ["PYTHONPATH"] = str(sandbox.src)
        import transformer_xl  # noqa: F401
        work = Path(tmp) / "logs"
        work.mkdir()
        for t in targets:
            results.append(mutate_target(t, sandbox, deadline, args.timeout_factor, work, args.mutant,
                                         args.test_seconds))
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"minutes": round((time.monotonic() - started) / 60, 1),
                                                 "results": results}, indent=1) + "\n")
    print(f"\n{(time.monotonic() - started) / 60:.1f} min\n")
    print(summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
