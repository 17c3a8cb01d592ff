"""Helpers of tests/hf: the transformers-5 environment, run beside the main one.

transformers 4.35.2 (the judge, in the main environment that runs pytest) and transformers 5 (what
``transformer_xl.hf`` serves) cannot share an environment: the tests write HuggingFace-4.35.2 folders and
reference numbers here, then run ``hf5_side.py`` with the python of a second environment that has
transformers 5. That python is ``$TXL_HF5_PYTHON``, by default ``.venv-hf5/bin/python`` beside the repository's
``src``; the tests that need it skip, saying how to make it, when it is absent. It is made with::

    python3 -m venv .venv-hf5 && .venv-hf5/bin/pip install torch==2.13.0 && \
        .venv-hf5/bin/pip install -e ".[hub,transformers]"
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
SIDE = Path(__file__).resolve().parent / "hf5_side.py"
HF5_ENV = "TXL_HF5_PYTHON"
MAKE_HF5 = ('python3 -m venv .venv-hf5 && .venv-hf5/bin/pip install torch==2.13.0 && '
            '.venv-hf5/bin/pip install -e ".[hub,transformers]"')


def hf5_python() -> Optional[Path]:
    """The transformers-5 environment's python, or None when there is none."""
    given = os.environ.get(HF5_ENV)
    path = Path(given) if given else REPO / ".venv-hf5" / "bin" / "python"
    return path if path.exists() else None


def hf5_env(**changes: str) -> Dict[str, str]:
    """The child's environment: this checkout's sources first, offline, quiet, one thread per process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PYTHONPATH=str(REPO / "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", TXL_DEBUG="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.update(changes)
    return env


def run_hf5(python: Path, argv: List[str], cwd: Path, env: Dict[str, str], timeout: int = 300):
    """``python ARGV`` in the transformers-5 environment; AssertionError with its stderr when it fails."""
    done = subprocess.run([str(python), *argv], cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)} (exit {done.returncode}):\n{done.stderr[-4000:]}"
    return done


def side(python: Path, task: str, spec: dict, work: Path, timeout: int = 300, **env_changes: str) -> dict:
    """``hf5_side.py TASK``: the spec written as JSON in ``work``, the result read back."""
    work.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = work / f"{task}-spec.json", work / f"{task}-out.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    run_hf5(python, [str(SIDE), task, str(spec_path), str(out_path)], work, hf5_env(**env_changes), timeout)
    return json.loads(out_path.read_text(encoding="utf-8"))
