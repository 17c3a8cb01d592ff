"""Runs cases of Python, each in a child process that has imported nothing of transformer_xl.

Started as ``python tests/fresh_server.py`` (a fresh interpreter; this file imports nothing of the package). It
imports torch, numpy and safetensors (and the third-party modules ``--preload`` names), which every case would
import first anyway (about 1 s of the 1.5 to 3 s a fresh ``python -c`` costs), checks that no module of
``transformer_xl`` is loaded, then reads one JSON case per line from stdin and forks a child per case (``--jobs``
at a time). A case is ``{"id", "cwd"}`` with either ``"code"`` (run as ``__main__``) or ``"path"`` and ``"argv"``
(a script run as ``python PATH ARGV...`` runs it), and optionally ``"threads"`` (torch's CPU threads, as
``OMP_NUM_THREADS`` would set them). The child changes to ``cwd``, runs the case and exits 0, or prints its
traceback and exits 1. One JSON line per case goes to stdout: ``{"id", "status", "stdout", "stderr", "seconds",
"cpu_seconds"}``. A child that runs past ``--timeout`` seconds (or its case's own ``"timeout"``) is killed (status
-9).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback


def preload(extra=()) -> None:
    import importlib

    import numpy  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401

    for name in extra:  # third-party modules every case of this server imports anyway (transformers)
        importlib.import_module(name)

    loaded = sorted(m for m in sys.modules if m == "transformer_xl" or m.startswith("transformer_xl."))
    if loaded:
        raise SystemExit(f"fresh_server: transformer_xl modules are loaded before any case: {loaded}")


def child(case: dict, out_path: str, err_path: str) -> None:
    """In the forked child: run the case with stdout and stderr going to the two files; never returns."""
    import runpy

    import torch

    for fd, path in ((1, out_path), (2, err_path)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
    sys.stdin = open(os.devnull)
    status = 0
    try:
        os.chdir(case["cwd"])
        if "threads" in case:
            torch.set_num_threads(int(case["threads"]))
        if "path" in case:
            sys.argv = [case["path"], *case.get("argv", [])]
            sys.path[0] = os.path.dirname(os.path.abspath(case["path"]))
            runpy.run_path(case["path"], run_name="__main__")
        else:
            sys.argv, sys.path[0] = ["-c"], ""  # as python -c has them
            exec(compile(case["code"], f"<{case['id']}>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the case's failure, reported to the test
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read()
    os.unlink(path)
    return text


def run_cases(cases: list, python: str = sys.executable, jobs: int = 2, timeout: float = 120.0, preload=(),
              cwd=None, env=None, total: float = 900.0) -> dict:
    """The client's side: ``cases`` run by one fresh server of ``python`` (this file), ``jobs`` children at a time,
    each killed past ``timeout`` seconds, the third-party modules ``preload`` imported before the forks; all of it
    within ``total`` seconds: ``{id: result}``."""
    if not cases:
        return {}
    done = subprocess.run([python, __file__, "--jobs", str(jobs), "--timeout", str(timeout), "--preload", *preload],
                          cwd=cwd, input="".join(json.dumps(c) + "\n" for c in cases), capture_output=True,
                          text=True, env=env, timeout=total)
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["id"]: r for r in map(json.loads, done.stdout.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--preload", nargs="*", default=[], help="third-party modules to import first")
    args = parser.parse_args()
    preload(args.preload)
    cases = [json.loads(line) for line in sys.stdin if line.strip()]
    running = {}  # pid -> (case, stdout file, stderr file, start)
    pending = list(reversed(cases))
    while pending or running:
        while pending and len(running) < args.jobs:
            case = pending.pop()
            paths = []
            for suffix in (".out", ".err"):
                fd, path = tempfile.mkstemp(prefix="fresh-", suffix=suffix)
                os.close(fd)
                paths.append(path)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                child(case, *paths)
            running[pid] = (case, *paths, time.perf_counter())
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid == 0:
            now = time.perf_counter()
            for other, (case_of, *_, start) in running.items():
                if now - start > float(case_of.get("timeout", args.timeout)):
                    os.kill(other, signal.SIGKILL)
            select.select([], [], [], 0.01)
            continue
        case, out_path, err_path, start = running.pop(pid)
        print(json.dumps({"id": case["id"], "status": os.waitstatus_to_exitcode(status), "stdout": _read(out_path),
                          "stderr": _read(err_path), "seconds": round(time.perf_counter() - start, 3),
                          "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3)}), flush=True)

if __name__ == "__main__":
    main()
