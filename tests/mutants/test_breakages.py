"""Tests of the tests: each target test, run in a child pytest under its deliberate breakage (``breakages.py``),
must turn red. A target that passed against the broken code would claim a property it does not check."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Dict

import pytest
from fresh_server import run_cases

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# (breakage, the test that must fail under it, modules it needs[, what its failure must say])
CASES = [
    ("generate-raises", "tests/generation/test_generation_cli.py::test_generate_is_reproducible_with_a_seed", ()),
    ("eval-drops-lengths", "tests/evaluation/test_eval_converted.py::test_eval_paper_settings_flags", ()),
    ("eval-drops-lengths", "tests/training/test_training.py::test_eval_command_reports_ppl_and_json", ()),
    ("streamed-zeros",
     "tests/training/test_footprint.py::test_eval_switches_to_streamed_attention_when_only_it_fits", ()),
    ("readme-loop-forgets",
     "tests/export/test_readme_loop.py::test_the_readme_loop_scores_and_generates_as_the_commands_do",
     ("onnxruntime", "onnxscript")),
    ("kill-after-the-run",
     "tests/training/test_kill_resume.py::test_sigkill_anywhere_then_resume_equals_an_uninterrupted_run[10]", ()),
    ("bf16-ignores-amx", "tests/test_devices.py::test_native_bf16_is_read_from_the_cpu_flags[sapphire-rapids]", ()),
    ("cpu-flags-misread", "tests/test_devices.py::test_this_machines_answer_is_onednns", ()),
    ("memory-joined-backwards",
     "tests/model/test_recurrence.py::test_memory_is_the_layer_inputs_of_the_last_positions[0-6]", ()),
    ("heads-sized-by-d-model", "tests/model/test_config.py::test_any_number_of_heads_of_any_size[0]", ()),
    ("run-config-drops-d-inner", "tests/training/test_train_config.py::test_every_builtin_config_is_valid[ptb]", ()),
    ("segment-generation-forgets",
     "tests/generation/test_generation.py::test_other_attention_types_generate_with_segment_method[2]", ()),
    ("hf-clusters-kept-in-their-order",
     "tests/convert/test_convert_vocab.py::test_convert_with_huggingface_vocab_then_generate_and_score",
     ("transformers", "sacremoses")),
    ("context-losses-misaligned",
     "tests/evaluation/test_context.py::test_context_losses_are_aligned_across_lengths[xl]", ()),
    ("pickle-reader-runs-payloads",
     "tests/data/test_payload_pickles.py::test_the_reader_refuses_the_payload_and_runs_nothing[vocab_exec_p4.pkl]",
     ()),
    ("target-log-probs-in-bf16",
     "tests/model/test_adaptive.py::test_bf16_autocast_keeps_log_softmax_in_float32[1]", ()),
    ("memory-not-detached",  # by its assertion (the clone() it had kept the graph: backward ran into it twice)
     "tests/model/test_gradients.py::test_gradient_through_memory_equals_gradient_with_constant_memory", (),
     "Tensor-likes are not equal"),
    ("corpus-cache-rewritten", "tests/data/test_data_corpora.py::test_second_load_does_not_retokenize", ()),
    ("default-corpus-rebuilt", "tests/data/test_data_corpora.py::test_default_corpus_is_deterministic_real_text", ()),
    ("lm-eval-generates-from-last-token",
     "tests/evaluation/test_lm_eval.py::test_generate_until_equals_txl_generate_greedy[word]", ("lm_eval",)),
]


def broken_case(name: str, target: str) -> dict:
    """The child pytest of ``target`` under the breakage ``name``, as a case of tests/fresh_server.py (a fresh
    interpreter per case, forked after torch, pytest and hypothesis are imported, none of the package)."""
    code = (f"import os, sys\nos.environ['TXL_BREAKAGE'] = {name!r}\nsys.path.insert(0, {str(HERE)!r})\n"
            f"import pytest\nsys.exit(pytest.main(['-p', 'breakages', '-p', 'no:cacheprovider', '-o', 'addopts=', "
            f"'-q', '-x', '--no-header', '-W', 'ignore', {target!r}]))\n")
    return {"id": f"{name} {target}", "cwd": str(REPO), "code": code}


@pytest.fixture(scope="module")
def broken() -> Dict[str, dict]:
    """Every case of the module, run when the first test asks (two children at a time): ``{id: result}``."""
    cases = [broken_case(name, target) for name, target, needs, *_ in CASES
             if all(importlib.util.find_spec(module) for module in needs)]
    paths = [str(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return run_cases(cases, jobs=2, timeout=900, preload=["pytest", "hypothesis"], cwd=REPO, env=env, total=3600)


@pytest.mark.parametrize("name, target, needs, expect", [(*c, "")[:4] for c in CASES],
                         ids=[f"{c[0]}-{c[1].rsplit('::', 1)[1]}" for c in CASES])
def test_the_test_turns_red_on_its_breakage(name, target, needs, expect, broken):
    for module in needs:
        pytest.importorskip(module)
    done = broken[f"{name} {target}"]
    stdout, stderr = done["stdout"], done["stderr"]
    if done["status"] == 0 and " skipped" in stdout and " passed" not in stdout:
        pytest.skip(f"{target} is skipped here")
    assert f"breakage {name} applied" in stderr, stderr[-2000:]
    assert done["status"] == 1 and f"FAILED {target}" in stdout, (stdout + stderr)[-4000:]
    assert expect in stdout, stdout[-4000:]
