"""What a new user meets in the first hour (issue 22): each surprise is now one line ``txl CMD: error: ...`` and
exit status 2, naming what to change, and nothing is trained or written for it."""

from pathlib import Path

import pytest

from transformer_xl import cli

TINY = ["--n-layer", "1", "--d-model", "16", "--n-head", "2", "--d-head", "8", "--d-inner", "16", "--tgt-len", "4",
        "--mem-len", "4", "--batch-size", "2", "--eval.batch-size", "2", "--max-steps", "1", "--progress", "false",
        "--tensorboard", "false"]


def one_error_line(argv, capsys, command="train"):
    """Run ``txl ARGV``; the single stderr line, after checking the exit status 2 and that stdout is empty."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"txl {command}: error: ") and out == "", err
    return lines[0]


def wikitext2_folder(root: Path) -> Path:
    """A folder laid out as pytorch/examples' WikiText-2: ``wikitext-2/{train,valid,test}.txt``."""
    folder = root / "wikitext-2"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text(" = Valkyria Chronicles = \n the game @-@ play \n" * 40)
    return folder


def test_named_corpus_in_another_corpus_folder_says_which_files_it_expected(tmp_path, capsys):
    folder = wikitext2_folder(tmp_path)
    line = one_error_line(["train", "--dataset", "ptb", "--data-dir", folder, "--cache-dir", tmp_path / "c",
                           "--run-dir", tmp_path / "run", *TINY], capsys)
    assert "ptb.{train,valid,test}.txt" in line and str(folder) in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("section,value,override", [
    ("model", "3", ["--n-layer", "2"]),
    ("data", "[ptb]", ["--dataset", "default"]),
    ("train", "fast", ["--max-steps", "1"]),
    ("eval", "true", ["--eval.max-steps", "1"]),
    ("model", "3", []),
])
def test_config_section_that_is_not_a_mapping_names_the_section_and_the_file(tmp_path, capsys, section, value,
                                                                             override):
    config = tmp_path / "my.yaml"
    config.write_text(f"{section}: {value}\n")
    line = one_error_line(["train", "--config", config, "--run-dir", tmp_path / "run", *override], capsys)
    assert f"{config}: section '{section}' must be a mapping" in line
    assert not (tmp_path / "run").exists()


def test_empty_config_section_is_an_empty_mapping(tmp_path):
    """``model:`` with nothing under it (YAML null) inherits the base's fields, and takes overrides."""
    from transformer_xl.training import load_run_config

    config = tmp_path / "my.yaml"
    config.write_text("base: default.yaml\nmodel:\ntrain:\n  max_steps: 7\n")
    cfg = load_run_config(str(config), ["--d-model", "64"])
    assert cfg.model.d_model == 64 and cfg.model.n_layer == 4 and cfg.train.max_steps == 7


EXPECTED_CORPORA = "expected one of wt103, wt2, ptb, enwik8, text8, lm1b, shakespeare, default, stdlib, text"


def test_unknown_corpus_names_the_flags_in_train(tmp_path, capsys):
    line = one_error_line(["train", "--dataset", "nosuch", "--run-dir", tmp_path / "run"], capsys)
    assert line == (f"txl train: error: --dataset: unknown corpus 'nosuch'; {EXPECTED_CORPORA} "
                    f"(your own files: --dataset text --train-file FILE)")
    assert not (tmp_path / "run").exists()


def test_unknown_corpus_names_the_flags_in_eval(tmp_path, capsys):
    from transformer_xl.model import TransformerXL, TransformerXLConfig

    TransformerXL(TransformerXLConfig(n_token=10, n_layer=1, n_head=2, d_model=8, d_head=4, d_inner=8, tgt_len=4,
                                      mem_len=4)).save_pretrained(tmp_path / "ckpt")
    line = one_error_line(["eval", tmp_path / "ckpt", "--dataset", "nosuch", "--split", "valid"], capsys, "eval")
    assert line == (f"txl eval: error: --dataset: unknown corpus 'nosuch'; {EXPECTED_CORPORA} "
                    f"(your own files: --dataset text --valid-file FILE)")


def test_unknown_corpus_in_python_names_the_function():
    from transformer_xl.data import load_corpus
    from transformer_xl.errors import DataError

    with pytest.raises(DataError, match=r"^unknown corpus 'nosuch'; known corpora: wt103, wt2, ptb, enwik8, text8, "
                                        r"lm1b, shakespeare, default, stdlib "
                                        r"\(or use load_text_corpus for your own files\)$"):
        load_corpus("nosuch")


def test_resume_without_config_goes_on_with_the_runs_own_settings(tmp_path, capsys):
    """``txl train --resume --run-dir RUN`` reads RUN/run.yaml: a run started with other model flags than the
    default config's resumes (it used to be refused as a model that differs from the checkpoint's)."""
    run = tmp_path / "run"
    text = tmp_path / "t.txt"
    text.write_text("abcdefghij klmnopq rstuvwxyz\n" * 60)
    data = ["--dataset", "text", "--level", "char", "--train-file", text, "--valid-file", text, "--test-file", text,
            "--cache-dir", tmp_path / "cache"]
    assert cli.main([str(a) for a in ["train", "--run-dir", run, *data, *TINY]]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", "--run-dir", str(run), "--max-steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "done: 3 steps" in out, out
    assert "d_model: 16" in (run / "run.yaml").read_text() and "max_steps: 3" in (run / "run.yaml").read_text()
