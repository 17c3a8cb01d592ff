"""Hub ids, hub revisions, HuggingFace folders and our own hub repositories, opened with no network.

A huggingface_hub cache is built in a temporary folder as a download leaves it (tests/hub_cache.py; checked with
huggingface_hub's own ``scan_cache_dir``), holding repositories whose every file HuggingFace's own code wrote:
``TransfoXLLMHeadModel.save_pretrained`` (config.json, pytorch_model.bin, model.safetensors) and
``TransfoXLTokenizer.save_vocabulary`` (vocab.pkl), with WikiText-103's layout at toy size (three tail clusters,
div_val 4, same_length, clamp_len, untie_r, tgt_len in config.json, a vocabulary counted on WikiText-2 text).
``main`` points at a newer commit than an older one that still sits in the cache. Everything runs with
``HF_HUB_OFFLINE=1``. HuggingFace's model, loaded by HuggingFace from the same snapshot folder, is the judge.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

pytest.importorskip("huggingface_hub")
pytest.importorskip("sacremoses")
pytest.importorskip("transformers")  # hf_oracle: HuggingFace's own TransfoXL judges

from data_fixtures import one_line, require
from helpers import assert_real_signal
from hf_oracle import TransfoXLLMHeadModel, hf_ids, hf_model, hf_text, hf_tokenizer, save_hf, worst_differences
from hub_cache import add_commit, add_folder, repo_folder
from hub_endpoint import HubEndpoint

from transformer_xl import TransformerXL, TransformerXLTokenizer, open_checkpoint
from transformer_xl.cli import main
from transformer_xl.errors import CheckpointError, TXLError

REPO = "toy-transfo-xl/transfo-xl-wt103"
OURS = "toy-org/converted"
EVIL = "evil-org/transfo-xl"
TGT_LEN = 8
WT103_LIKE = dict(d_model=32, d_embed=64, n_head=4, d_head=8, d_inner=64, n_layer=2, div_val=4, mem_len=12,
                  clamp_len=10, same_length=True, untie_r=True, proj_share_all_but_first=True, tgt_len=TGT_LEN)
PROMPT = "The game was released in"


class Hub:
    """The cache and what was put in it."""

    def __init__(self, root: Path):
        self.root = root
        self.cache = root / "hf-cache"
        self.cache.mkdir()
        self.marker = root / "payload-ran"


def _wt2_corpus(root: Path) -> Path:
    lines = require("wikitext-2/train.txt").read_text(encoding="utf-8").splitlines()[:400]
    path = root / "corpus.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _hf_folder(root: Path, name: str, vocab_size: int, seed: int, formats) -> Path:
    cuts = [vocab_size // 12, vocab_size // 6, vocab_size // 2]
    model = hf_model(dict(WT103_LIKE, vocab_size=vocab_size, cutoffs=cuts), seed=seed)
    folder = root / name
    for fmt in formats:  # HuggingFace writes each format on its own; the hub holds both side by side
        part = root / f"{name}-{fmt}"
        save_hf(model, part, fmt)
        folder.mkdir(exist_ok=True)
        for f in part.iterdir():
            (folder / f.name).write_bytes(f.read_bytes())
    ids = torch.randint(0, vocab_size, (2, 24), generator=torch.Generator().manual_seed(seed))
    assert_real_signal(TransformerXL.from_pretrained(folder).eval(), ids)  # numbers that attention moves
    return folder


class _Payload:
    """Unpickling this would run ``touch MARKER``; our reader must refuse it without running it."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Hub:
    h = Hub(tmp_path_factory.mktemp("hub"))
    h.tok, vocab_pkl = hf_tokenizer(_wt2_corpus(h.root), h.root)
    v = len(h.tok.sym2idx)
    h.folder_a = _hf_folder(h.root, "older", v, seed=1, formats=["bin"])
    h.folder_b = _hf_folder(h.root, "newer", v, seed=2, formats=["bin", "safetensors"])
    for folder in (h.folder_a, h.folder_b):
        (folder / "vocab.pkl").write_bytes(Path(vocab_pkl).read_bytes())
    h.commit_a = add_folder(h.cache, REPO, h.folder_a)
    h.commit_b = add_folder(h.cache, REPO, h.folder_b)  # main moves to the newer commit
    # A repository written by our own save_pretrained (the converted newer model and its tokenizer).
    h.folder_ours = h.root / "ours"
    TransformerXL.from_pretrained(h.folder_b).save_pretrained(h.folder_ours)
    TransformerXLTokenizer.from_pretrained(h.folder_b).save_pretrained(h.folder_ours)
    add_folder(h.cache, OURS, h.folder_ours)
    evil = pickle.dumps({"sym2idx": {"a": 0}, "idx2sym": ["a"], "x": _Payload(h.marker)})
    add_commit(h.cache, EVIL, {"config.json": h.folder_a / "config.json",
                                "pytorch_model.bin": h.folder_a / "pytorch_model.bin", "vocab.pkl": evil})
    return h


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def hf_from(folder) -> TransfoXLLMHeadModel:
    """HuggingFace's own model, loaded by HuggingFace from a folder."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransfoXLLMHeadModel.from_pretrained(folder).eval()


def snapshot(hub: Hub, commit: str, repo: str = REPO) -> Path:
    return repo_folder(hub.cache, repo) / "snapshots" / commit


def txl(hub: Hub, *argv, **env_changes):
    """``txl ARGV`` in a fresh process that finds the cache through HF_HUB_CACHE, offline (unless ``env_changes``
    say otherwise)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub.cache), "TXL_DEBUG": "", **env_changes}
    code = "import sys; from transformer_xl.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], capture_output=True, text=True, env=env,
                          timeout=300)


# ---------------------------------------------------------------------------- the cache itself
def test_the_cache_is_laid_out_as_huggingface_hub_reads_it(hub):
    from huggingface_hub import hf_hub_download, scan_cache_dir

    info = {r.repo_id: r for r in scan_cache_dir(hub.cache).repos}
    assert set(info) == {REPO, OURS, EVIL}
    revisions = {r.commit_hash: r for r in info[REPO].revisions}
    assert set(revisions) == {hub.commit_a, hub.commit_b}
    assert revisions[hub.commit_b].refs == {"main"}
    path = hf_hub_download(REPO, "config.json", cache_dir=hub.cache, local_files_only=True)
    assert Path(path).parent == snapshot(hub, hub.commit_b)


# ---------------------------------------------------------------------------- Python: from_pretrained
@pytest.mark.parametrize("how", ["id", "revision", "snapshot folder"])
def test_from_pretrained_gives_huggingfaces_losses(hub, offline, how):
    if how == "id":
        ours = TransformerXL.from_pretrained(REPO, cache_dir=hub.cache)
        judge = hf_from(snapshot(hub, hub.commit_b))
    elif how == "revision":
        ours = TransformerXL.from_pretrained(REPO, revision=hub.commit_a, cache_dir=hub.cache)
        judge = hf_from(snapshot(hub, hub.commit_a))
    else:
        ours = TransformerXL.from_pretrained(snapshot(hub, hub.commit_b))
        judge = hf_from(snapshot(hub, hub.commit_b))
    assert not ours.training  # evaluation mode, as HuggingFace's from_pretrained
    assert (ours.config.tgt_len, ours.config.mem_len, ours.config.clamp_len) == (TGT_LEN, 12, 10)
    worst_lp, worst_loss = worst_differences(judge, ours, TGT_LEN)
    assert worst_lp < 1e-4 and worst_loss < 1e-4, (worst_lp, worst_loss)


def test_the_revision_is_the_older_model(hub, offline):
    """The two commits hold different weights, so the test above can tell the revisions apart."""
    older = TransformerXL.from_pretrained(REPO, revision=hub.commit_a, cache_dir=hub.cache)
    worst_lp, _ = worst_differences(hf_from(snapshot(hub, hub.commit_b)), older, TGT_LEN)
    assert worst_lp > 1e-2


def test_our_own_repository_loads_by_id_to_its_folders_numbers(hub, offline):
    by_id = open_checkpoint(OURS, cache_dir=hub.cache)
    by_folder = TransformerXL.from_pretrained(hub.folder_ours)
    assert by_id.run.repo_id == OURS and by_id.run.format == "txl"
    x = torch.randint(0, by_folder.config.n_token, (2, 3 * TGT_LEN), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        a = by_id.model(x[:, :-1], labels=x[:, 1:]).losses
        b = by_folder(x[:, :-1], labels=x[:, 1:]).losses
    assert torch.equal(a, b)
    assert by_id.tokenizer.vocab.to_dict() == TransformerXLTokenizer.from_pretrained(hub.folder_b).vocab.to_dict()


def test_tokenizer_by_id_gives_huggingfaces_ids_and_text(hub, offline):
    tok = TransformerXLTokenizer.from_pretrained(REPO, cache_dir=hub.cache)
    text = "The game 's 1,000 copies were released in 2011 , and it was well-known in Japan . Zyxwv"
    tokens = hub.tok.tokenize(text)
    assert tok.encode(text, warn_unknown=False) == hf_ids(hub.tok, tokens)
    known = [t for t in tokens if t in hub.tok.sym2idx]
    assert tok.decode(hf_ids(hub.tok, known)) == hf_text(hub.tok, known)


def test_an_id_that_cannot_be_resolved_is_one_exception(hub, offline):
    with pytest.raises(CheckpointError) as err:
        TransformerXL.from_pretrained("nobody/nothing", cache_dir=hub.cache)
    msg = one_line(err.value)
    assert "nobody/nothing" in msg and "offline" in msg
    with pytest.raises(CheckpointError) as err:
        open_checkpoint(REPO, revision="0" * 40, cache_dir=hub.cache)
    assert "0" * 40 in one_line(err.value)


def test_without_huggingface_hub_the_error_names_the_extra(hub, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_hub(name, *args, **kwargs):
        if name.startswith("huggingface_hub"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hub)
    with pytest.raises(CheckpointError) as err:
        TransformerXL.from_pretrained(REPO)
    assert 'pip install "transformer-xl[hub]"' in one_line(err.value)


# ---------------------------------------------------------------------------- the commands
def _hf_greedy_text(hub: Hub, n: int):
    """HuggingFace's greedy continuation of PROMPT (it stops at <eos>, id 0) and its text by HuggingFace's Moses."""
    hf = hf_from(snapshot(hub, hub.commit_b))
    prompt_tokens = hub.tok.tokenize(PROMPT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = hf.generate(torch.tensor([hf_ids(hub.tok, prompt_tokens)]), max_new_tokens=n, do_sample=False,
                          pad_token_id=0)
    idx2sym = {i: s for s, i in hub.tok.sym2idx.items()}
    new = [idx2sym[i] for i in out[0, len(prompt_tokens):].tolist()]
    return new, hf_text(hub.tok, prompt_tokens + new)


def test_txl_generate_by_id_prints_huggingfaces_greedy_continuation(hub, offline):
    new, expected = _hf_greedy_text(hub, 24)
    assert len(new) >= 3
    run = txl(hub, "generate", REPO, "--greedy", "--prompt", PROMPT, "--max-new-tokens", 24, "--stop", "<eos>")
    assert run.returncode == 0, run.stderr
    assert run.stdout == expected + "\n"
    # The Python text API gives the same text.
    ckpt = open_checkpoint(REPO, cache_dir=hub.cache)
    text = ckpt.generate(PROMPT, max_new_tokens=24, do_sample=False, stop=["<eos>"])
    assert PROMPT + text + "\n" == run.stdout


def test_an_unreachable_hub_still_opens_what_the_cache_holds(hub):
    """Online (HF_HUB_OFFLINE unset) with nothing listening at HF_ENDPOINT: the cached model generates as offline,
    and an id the cache lacks is one line saying that the hub cannot be reached."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    online = dict(HF_HUB_OFFLINE="0", HF_ENDPOINT=f"http://127.0.0.1:{port}", NO_PROXY="127.0.0.1",
                  no_proxy="127.0.0.1")
    new, expected = _hf_greedy_text(hub, 8)
    run = txl(hub, "generate", REPO, "--greedy", "--prompt", PROMPT, "--max-new-tokens", 8, "--stop", "<eos>",
              **online)
    assert run.returncode == 0 and run.stdout == expected + "\n", run.stderr
    missing = txl(hub, "generate", "nobody/nothing", "--prompt", "hi", **online)
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        f"txl generate: error: nobody/nothing: not a local folder; as a hub id: the hub cannot be reached "
        f"(127.0.0.1:{port}: Connection refused) and config.json is not in the huggingface_hub cache"], missing.stderr


def _hf_document_nll(hf, ids):
    """HuggingFace's summed NLL of ids[1:] given the document read in segments of TGT_LEN with memory."""
    ids = torch.tensor(ids)
    inputs, labels = ids[:-1], ids[1:]
    mems, nll = None, 0.0
    with torch.no_grad():
        for s in range(0, inputs.numel(), TGT_LEN):
            out = hf(inputs[s:s + TGT_LEN][None], mems=mems)
            logp = out.prediction_scores[0].gather(1, labels[s:s + TGT_LEN, None])
            nll -= float(logp.double().sum())
            mems = out.mems
    return nll


def test_txl_score_by_id_gives_huggingfaces_nll_and_names_its_figures(hub, offline, tmp_path):
    lines = require("wikitext-2/valid.txt").read_text(encoding="utf-8").splitlines()
    docs = [ln.strip() for ln in lines if len(ln.split()) > 30][:2]
    path = tmp_path / "doc.txt"
    path.write_text(f"{docs[0]}\n\n{docs[1]}\n", encoding="utf-8")
    run = txl(hub, "score", REPO, path, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert "bpc" not in result and {"ppl", "bits_per_token"} <= set(result)  # word level: per token
    assert "not in the vocabulary" in run.stderr  # unknown words are said, as generate and eval say them
    hf = hf_from(snapshot(hub, hub.commit_b))
    for item, doc in zip(result["per_document"], docs):
        ids = hf_ids(hub.tok, hub.tok.tokenize(doc)) + [hub.tok.sym2idx["<eos>"]]
        assert item["tokens"] == len(ids) - 1
        assert abs(item["loss"] * item["tokens"] - _hf_document_nll(hf, ids)) < 1e-4 * item["tokens"]
    ckpt = open_checkpoint(REPO, cache_dir=hub.cache)
    score = ckpt.score(path.read_text(encoding="utf-8"))
    assert abs(score.loss - result["loss"]) < 1e-9 and score.figures == {k: result[k] for k in score.figures}
    text = txl(hub, "score", REPO, path)
    assert text.returncode == 0 and "bits/token" in text.stdout and "bpc" not in text.stdout


def test_a_missing_id_is_one_line_and_exit_2(hub):
    run = txl(hub, "generate", "nobody/nothing", "--prompt", "hello")
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "nobody/nothing" in lines[0] and "offline" in lines[0], run.stderr


def _wt2_lines_file(hub: Hub, tmp_path):
    """Two WikiText-2 valid lines in a file, and the ids HuggingFace's tokenizer gives them (<eos> after each)."""
    lines = require("wikitext-2/valid.txt").read_text(encoding="utf-8").splitlines()
    docs = [ln.strip() for ln in lines if len(ln.split()) > 30][:2]
    path = tmp_path / "test.txt"
    path.write_text("".join(doc + "\n" for doc in docs), encoding="utf-8")
    eos = hub.tok.sym2idx["<eos>"]
    return path, [i for doc in docs for i in hf_ids(hub.tok, hub.tok.tokenize(doc)) + [eos]]


def test_txl_eval_of_a_huggingface_folder_and_its_hub_id_gives_huggingfaces_loss(hub, tmp_path, capsys):
    path, ids = _wt2_lines_file(hub, tmp_path)
    corpus = ["--dataset", "text", "--test-file", path, "--batch-size", 1, "--json"]
    assert main(["eval", str(snapshot(hub, hub.commit_b)), *map(str, corpus)]) == 0
    folder = json.loads(capsys.readouterr().out)
    assert folder["tokens"] == len(ids) - 1 and folder["metric"] == "ppl"
    hf_nll = _hf_document_nll(hf_from(snapshot(hub, hub.commit_b)), ids)  # segments of tgt_len with memory
    assert abs(folder["loss"] * folder["tokens"] - hf_nll) < 1e-4 * folder["tokens"]
    run = txl(hub, "eval", REPO, *corpus)
    assert run.returncode == 0, run.stderr
    by_id = json.loads(run.stdout)
    assert by_id["checkpoint"] == str(snapshot(hub, hub.commit_b))
    assert by_id["tokens"] == folder["tokens"] and abs(by_id["loss"] - folder["loss"]) < 1e-9


def test_txl_context_of_a_huggingface_folder_and_its_hub_id_gives_huggingfaces_loss(hub, tmp_path):
    """At context length mem_len (12, segments of tgt_len 8) the curve's point is HuggingFace's loss with memory."""
    path, ids = _wt2_lines_file(hub, tmp_path)
    run = txl(hub, "context", snapshot(hub, hub.commit_b), REPO, "--names", "folder", "id", "--lengths", 4, 12,
              "--batch-size", 1, "--max-tokens", len(ids), "--dataset", "text", "--split", "test", "--test-file", path,
              "--plot", tmp_path / "context.png", "--json")
    assert run.returncode == 0, run.stderr
    loss = json.loads(run.stdout)["loss"]
    hf_nll = _hf_document_nll(hf_from(snapshot(hub, hub.commit_b)), ids)
    assert abs(loss["folder"]["12"] - hf_nll / (len(ids) - 1)) < 1e-4
    assert loss["id"] == loss["folder"] and loss["folder"]["4"] != loss["folder"]["12"]


@pytest.mark.parametrize("command, repo_id, why", [
    ("eval", "nobody/nothing", "no such repository on the hub"),
    ("context", "toy-org/no-weights", "no weights in it (no model.safetensors or pytorch_model.bin)"),
])
def test_what_only_the_hub_can_answer_is_one_line_and_exit_2(hub, tmp_path, command, repo_id, why):
    """Online, against a hub endpoint on this machine (offline, a cache cannot tell these apart from files not
    downloaded): a repository the hub does not hold, and one holding a config.json but no weights."""
    (tmp_path / "test.txt").write_text("the game\n", encoding="utf-8")
    repos = {"toy-org/no-weights": {"config.json": (hub.folder_a / "config.json").read_bytes()}}
    with HubEndpoint(repos) as endpoint:
        run = txl(hub, command, repo_id, "--dataset", "text", "--split", "test", "--test-file", tmp_path / "test.txt",
                  HF_HUB_OFFLINE="0", HF_ENDPOINT=endpoint.url, HF_HUB_CACHE=str(tmp_path / "cache"),
                  NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert lines[0].startswith(f"txl {command}: error: {repo_id}: not a local folder; as a hub id: {why}"), lines[0]


def test_a_vocab_pkl_with_a_payload_runs_nothing_and_is_one_line(hub, offline):
    run = txl(hub, "generate", EVIL, "--prompt", "hello")
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "vocab.pkl" in lines[0], run.stderr
    with pytest.raises(TXLError) as err:
        TransformerXLTokenizer.from_pretrained(EVIL, cache_dir=hub.cache)
    one_line(err.value)
    assert not hub.marker.exists()


def test_push_to_hub_uploads_a_repository_that_loads_back(hub, offline, monkeypatch, tmp_path):
    """push_to_hub hands upload_folder the files of save_pretrained and a model card; that folder, put in the
    cache as the hub would serve it, loads by id to the same numbers. (The upload itself is huggingface_hub's.)"""
    import shutil

    import huggingface_hub

    from transformer_xl import push_to_hub

    uploaded = tmp_path / "uploaded"

    def upload_folder(self, repo_id, folder_path, revision=None, commit_message=None, **kwargs):
        shutil.copytree(folder_path, uploaded)
        return type("Info", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/1"})()

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", lambda self, repo_id, **kw: None)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    ckpt = open_checkpoint(REPO, cache_dir=hub.cache)
    url = push_to_hub(ckpt.model, "me/pushed", ckpt.tokenizer)
    assert url.endswith("/commit/1")
    assert {"config.json", "model.safetensors", "vocab.json", "README.md"} <= {p.name for p in uploaded.iterdir()}
    assert "library_name: transformer-xl" in (uploaded / "README.md").read_text()
    add_folder(hub.cache, "me/pushed", uploaded)
    back = open_checkpoint("me/pushed", cache_dir=hub.cache)
    x = torch.randint(0, back.model.config.n_token, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(back.model(x[:, :-1], labels=x[:, 1:]).losses, ckpt.model(x[:, :-1], labels=x[:, 1:]).losses)
    assert back.tokenizer.vocab.to_dict() == ckpt.tokenizer.vocab.to_dict()


@pytest.mark.parametrize("revision", [None, "older"])
def test_train_init_from_a_hub_id_starts_from_its_weights(hub, tmp_path, revision):
    """Fine-tuning from a hub id (at main, or at an older commit with --init-revision): that commit's weights and
    vocabulary, a fresh schedule."""
    lines = require("wikitext-2/valid.txt").read_text(encoding="utf-8").splitlines()[:200]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pinned = ["--init-revision", hub.commit_a] if revision else []
    run = txl(hub, "train", "--init-from", REPO, *pinned, "--dataset", "text", "--train-file", tmp_path / "train.txt",
              "--run-dir", tmp_path / "run", "--cache-dir", tmp_path / "cache", "--max-steps", 1, "--lr", "1e-30",
              "--scheduler", "constant", "--dropout", "0.0", "--batch-size", 2, "--eval.batch-size", 2,
              "--eval.max-steps", 1, "--eval-interval", 1, "--progress", "false", "--tensorboard", "false")
    assert run.returncode == 0, run.stderr
    tuned = open_checkpoint(tmp_path / "run")
    source = open_checkpoint(snapshot(hub, hub.commit_a if revision else hub.commit_b))
    assert tuned.model.config == source.model.config
    tuned_state, source_state = tuned.model.state_dict(), source.model.state_dict()
    assert all(torch.equal(tuned_state[k], source_state[k]) for k in source_state)
    assert tuned.tokenizer.vocab.to_dict() == source.tokenizer.vocab.to_dict()
