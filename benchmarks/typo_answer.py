"""How long ``txl`` takes to answer a mistyped folder, as a user types it, against the same command with the
answer left to the command (after torch and the commands load).

    python benchmarks/typo_answer.py

In a temporary folder holding ``runs/default`` and ``runs/rl1/agent``, each command runs as a fresh process
three times (``txl ...``, the installed entry point; and ``python -c`` calling ``transformer_xl.cli.app.main``,
which skips the early reading) and prints the median wall time of each, the ratio, and the line printed.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_description, last_stderr_line, markdown_table, table_row

COMMANDS = (["generate", "runs/defualt", "--prompt", "hi"], ["eval", "runs/defualt"],
            ["score", "runs/defualt", "notes.txt"], ["export", "runs/defualt", "model.onnx"],
            ["convert", "runs/defualt", "out", "--from", "hf"], ["rl-eval", "runs/rl2"])
LATE = "import sys\nfrom transformer_xl.cli import app\nsys.exit(app.main(sys.argv[1:]))\n"


def timed(argv, cwd: Path, repeat: int = 3):
    times, line = [], ""
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        line = last_stderr_line(done)
    return statistics.median(times), line


def main() -> int:
    txl = shutil.which("txl") or str(Path(sys.executable).with_name("txl"))
    print(f"# {cpu_description()}")
    print(markdown_table(["command", "answered early", "after torch loads", "ratio", "line"]))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "runs" / "default").mkdir(parents=True)
        (root / "runs" / "rl1" / "agent").mkdir(parents=True)
        (root / "runs" / "rl1" / "agent" / "agent.json").write_text("{}", encoding="utf-8")
        for argv in COMMANDS:
            early, line = timed([txl, *argv], root)
            late, late_line = timed([sys.executable, "-c", LATE, *argv], root)
            same = "" if line == late_line else f" (late: {late_line})"
            print(table_row([f"txl {' '.join(argv)}", f"{early:.2f} s", f"{late:.2f} s", f"{late / early:.0f}x",
                             f"{line}{same}"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
