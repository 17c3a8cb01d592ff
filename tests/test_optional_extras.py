"""Without the optional extras (what ``pip install transformer-xl`` gives) the suite collects without errors and
skips what needs them: each of their modules is made unimportable in a child pytest that only collects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The modules of the optional and dev extras (pyproject.toml) and of what they bring.
EXTRAS = ("transformers", "sacremoses", "huggingface_hub", "onnx", "onnxruntime", "onnxscript", "lm_eval",
          "gymnasium", "popgym", "stable_baselines3", "sb3_contrib", "ray",
          "torchrl", "matplotlib", "tensorboard", "hypothesis", "mutmut", "libcst")
BLOCK = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None  # import raises ImportError\n"


def collect_without_extras(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "no_extras.py").write_text(BLOCK.format(names=EXTRAS), encoding="utf-8")
    paths = [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no_extras", "-p", "no:hypothesispytest", "-p",
                           "no:cacheprovider", "-o", "addopts=", "-q", "--collect-only", *args], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)}, capture_output=True, text=True,
                          timeout=600)


def test_the_suite_collects_without_the_extras(tmp_path):
    done = collect_without_extras(tmp_path, "-rs", "tests")
    tail = (done.stdout + done.stderr)[-3000:]
    assert done.returncode == 0, tail
    assert not any(line.startswith("ERROR") for line in done.stdout.splitlines()), tail
    assert " tests collected" in done.stdout.strip().splitlines()[-1], tail
    skipped = {line.split()[2].split(":")[0] for line in done.stdout.splitlines() if line.startswith("SKIPPED")}
    for module in ("convert/test_hf_compat.py", "convert/test_convert_vocab.py", "evaluation/test_lm_eval.py",
                   "export/test_export.py", "hub/test_hub.py", "sb3/test_sb3.py",
                   "rl/test_rllib.py", "rl/test_torchrl.py"):
        assert f"tests/{module}" in skipped, skipped
