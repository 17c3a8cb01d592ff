"""Named corpora (real PTB / WikiText-2 / tiny-shakespeare, synthetic enwik8 / text8 / lm1b), the default corpus,
user text corpora and the cache. Expectations are recomputed from the files with the original recipe."""

import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from data_fixtures import require

from transformer_xl.data import (
    DEFAULT_CORPUS_BYTES,
    BPETokenizer,
    ByteVocab,
    Corpus,
    Vocab,
    load_corpus,
    load_default_corpus,
    load_stdlib_corpus,
    load_text_corpus,
)
from transformer_xl.data import corpus as corpus_module


def original_word_tokens(path, lower=False):
    """``line.strip().split() + ['<eos>']`` for every line, as data_utils / vocabulary.py read a file."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            yield from (line.lower() if lower else line).split()
            yield "<eos>"


# --------------------------------------------------------------------------------------------- PTB / WT2
def test_ptb_counts_and_vocab(ptb):
    root = require("ptb")
    for split in ("train", "valid", "test"):
        assert ptb.split(split).size == sum(1 for _ in original_word_tokens(root / f"ptb.{split}.txt", True))
    vocab = {t for s in ("train", "valid", "test") for t in original_word_tokens(root / f"ptb.{s}.txt", True)}
    assert len(ptb.vocab) == len(vocab)
    assert (ptb.train.size, ptb.valid.size, ptb.test.size, len(ptb.vocab)) == (929_589, 73_760, 82_430, 10_000)
    assert ptb.level == "word" and ptb.metric == "ppl"
    assert "n" in ptb.vocab and "N" not in ptb.vocab  # lower-cased, as the original train.py asked


def test_wt2_counts_and_vocab_order_match_the_original(wt2):
    root = require("wikitext-2")
    counter = Counter()
    for split in ("train", "valid", "test"):  # the original counts all three, in this order
        tokens = list(original_word_tokens(root / f"{split}.txt"))
        assert wt2.split(split).size == len(tokens)
        counter.update(tokens)
    assert (wt2.train.size, len(wt2.vocab)) == (2_088_628, 33_278)
    expected = ["<eos>"] + [s for s, _ in counter.most_common() if s != "<eos>"]
    assert wt2.vocab.idx2sym == expected
    head = list(original_word_tokens(root / "train.txt"))[:500]
    assert [wt2.vocab.idx2sym[i] for i in wt2.train[:500]] == head


def test_original_getdata_layout_is_accepted(tmp_path, shared_cache, ptb):
    root = require("ptb")
    penn = tmp_path / "penn"
    penn.mkdir()
    for split in ("train", "valid", "test"):
        (penn / f"{split}.txt").symlink_to(root / f"ptb.{split}.txt")
    again = load_corpus("ptb", data_dir=tmp_path, cache_dir=shared_cache)
    assert np.array_equal(again.train, ptb.train) and again.vocab.idx2sym == ptb.vocab.idx2sym


def test_second_load_does_not_retokenize(wt2, shared_cache, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("tokenizer called on a cached corpus")

    for name in ("count_file", "count_text", "encode", "encode_file", "tokenize", "build_vocab"):
        monkeypatch.setattr(Vocab, name, boom)
    cached = {p: p.stat().st_mtime_ns for p in shared_cache.rglob("*") if p.is_file()}
    again = load_corpus("wt2", data_dir=require("wikitext-2"), cache_dir=shared_cache)
    assert isinstance(again.train, np.memmap) and again.train.dtype == np.uint16
    assert Path(again.train.filename).resolve().is_relative_to(shared_cache.resolve())  # mapped from the cache
    assert np.array_equal(again.train, wt2.train) and len(again.vocab) == len(wt2.vocab)
    assert {p: p.stat().st_mtime_ns for p in shared_cache.rglob("*") if p.is_file()} == cached  # nothing written


def test_shakespeare_chars(shared_cache):
    path = require("tinyshakespeare/input.txt")
    text = path.read_text(encoding="utf-8")
    c = load_corpus("shakespeare", data_dir=path.parent, cache_dir=shared_cache)
    assert len(c.vocab) == len(set(text)) and c.metric == "bpc"
    n_eval = len(text) * 5 // 100
    assert (c.train.size, c.valid.size, c.test.size) == (len(text) - 2 * n_eval, n_eval, n_eval)
    assert c.vocab.decode(c.train) + c.vocab.decode(c.valid) + c.vocab.decode(c.test) == text


# --------------------------------------------------------------------------------------------- enwik8 / text8
def make_bytes(n, seed=0):
    """Deterministic test bytes: ASCII words, newlines and multi-byte UTF-8, plus a few raw high bytes."""
    rng = np.random.default_rng(seed)
    pieces = [b"word", b" ", b"\n", "é".encode(), b"<page>", b"\t", b"\r", bytes([0xFF]), b"42"]
    out = bytearray()
    while len(out) < n:
        out += pieces[int(rng.integers(len(pieces)))]
    return bytes(out[:n])


def enwik8_reference(raw):
    """prep_enwik8.py then the original Vocab: decimal tokens per line, counted over train, valid, test."""
    n_eval = len(raw) * 5 // 100
    parts = [raw[:-2 * n_eval], raw[-2 * n_eval:-n_eval], raw[-n_eval:]]
    split_tokens = []
    for part in parts:
        text = " ".join(str(c) if c != ord("\n") else "\n" for c in part)
        split_tokens.append([t for line in text.split("\n") for t in line.strip().split()])
    counter = Counter()
    for toks in split_tokens:
        counter.update(toks)
    symbols = [s for s, _ in counter.most_common()]
    return symbols, [[symbols.index(t) for t in toks] for toks in split_tokens]


@pytest.mark.parametrize("as_zip", [False, True])
def test_enwik8_split_and_tokens(tmp_path, as_zip):
    raw = make_bytes(20_000)
    if as_zip:
        with zipfile.ZipFile(tmp_path / "enwik8.zip", "w") as zf:
            zf.writestr("enwik8", raw)
    else:
        (tmp_path / "enwik8").write_bytes(raw)
    c = load_corpus("enwik8", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    symbols, expected = enwik8_reference(raw)
    assert c.level == "byte" and c.metric == "bits_per_byte"
    assert c.vocab.idx2sym == symbols
    for split, ids in zip(("train", "valid", "test"), expected):
        assert list(c.split(split)) == ids
    # proportions: 90% / 5% / 5% of the bytes, minus the newlines
    n_eval = len(raw) // 20
    assert c.valid.size == n_eval - raw[-2 * n_eval:-n_eval].count(b"\n")
    assert c.vocab.decode(c.test) == raw[-n_eval:].replace(b"\n", b"").decode("utf-8", errors="replace")


def test_text8_split_and_tokens(tmp_path):
    rng = np.random.default_rng(1)
    words = ["anarchism", "originated", "as", "a", "term", "of", "abuse", "x"]
    text = " " + " ".join(words[int(i)] for i in rng.integers(len(words), size=3000)) + " \t\nend "
    (tmp_path / "text8").write_text(text, encoding="utf-8")
    c = load_corpus("text8", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    n_eval = len(text) * 5 // 100
    parts = [text[:-2 * n_eval], text[-2 * n_eval:-n_eval], text[-n_eval:]]
    # prep_text8.py: strip, spaces -> '_', join with ' '; the original Vocab then splits on whitespace
    tokens = [" ".join("_" if ch == " " else ch for ch in p.strip()).split() for p in parts]
    counter = Counter()
    for t in tokens:
        counter.update(t)
    symbols = [" " if s == "_" else s for s, _ in counter.most_common()]
    assert c.vocab.idx2sym == symbols and c.level == "char"
    for split, toks in zip(("train", "valid", "test"), tokens):
        assert c.vocab.decode(c.split(split)) == "".join(" " if t == "_" else t for t in toks)
    assert c.train.size + c.valid.size + c.test.size == sum(map(len, tokens))


# --------------------------------------------------------------------------------------------- lm1b
def test_lm1b_fake_layout(tmp_path):
    base = tmp_path / "1-billion-word-language-modeling-benchmark-r13output"
    train_dir = base / "training-monolingual.tokenized.shuffled"
    held_dir = base / "heldout-monolingual.tokenized.shuffled"
    train_dir.mkdir(parents=True)
    held_dir.mkdir(parents=True)
    shards = {"news.en-00002-of-00100": "the cat sat\nA dog\n", "news.en-00001-of-00100": "the end\n"}
    for name, text in shards.items():
        (train_dir / name).write_text(text, encoding="utf-8")
    (held_dir / "news.en.heldout-00000-of-00050").write_text("the zebra\n", encoding="utf-8")
    (held_dir / "news.en.heldout-00001-of-00050").write_text("not used\n", encoding="utf-8")
    (tmp_path / "1b_word_vocab.txt").write_text("<S> 0\nthe 5\n<UNK> 0\ncat 2\nsat 1\nend 1\ndog 1\n",
                                                encoding="utf-8")
    c = load_corpus("lm1b", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    sym = c.vocab.idx2sym
    assert sym == ["<S>", "the", "<UNK>", "cat", "sat", "end", "dog"]
    words = lambda ids: [sym[i] for i in ids]  # noqa: E731
    # shards in sorted order, each line wrapped in <S>, case kept ('A' is unknown)
    assert words(c.train) == ("<S> the end <S> <S> the cat sat <S> <S> <UNK> dog <S>").split()
    assert words(c.valid) == words(c.test) == "<S> the <UNK> <S>".split()
    assert c.meta["train_files"] == sorted(shards)


# --------------------------------------------------------------------------------------------- default corpus
def test_default_corpus_is_deterministic_real_text(tmp_path, monkeypatch):
    a = load_default_corpus(cache_dir=tmp_path / "a")
    b = load_corpus("default", cache_dir=tmp_path / "b")
    # built once: from its cache the corpus is read, not rebuilt (no source is read again)
    monkeypatch.setattr(corpus_module, "read_sources", lambda *args: pytest.fail("the default corpus was rebuilt"))
    assert np.array_equal(load_default_corpus(cache_dir=tmp_path / "a").train, a.train)
    assert isinstance(a.vocab, ByteVocab) and len(a.vocab) == 256 and a.metric == "bits_per_byte"
    for split in ("train", "valid", "test"):
        assert np.array_equal(a.split(split), b.split(split)) and a.split(split).size > 0
    n_eval = DEFAULT_CORPUS_BYTES * 5 // 100
    assert (a.train.size, a.valid.size, a.test.size) == (DEFAULT_CORPUS_BYTES - 2 * n_eval, n_eval, n_eval)
    data = b"".join(np.asarray(a.split(s), dtype=np.uint8).tobytes() for s in ("train", "valid", "test"))
    files = a.meta["files"]
    assert a.meta["sha256"] == b.meta["sha256"] == __import__("hashlib").sha256(data).hexdigest()
    assert [f[0] for f in files] == sorted(f[0] for f in files)
    assert not any(part in ("test", "tests", "idlelib", "site-packages") for f in files for part in f[0].split("/"))
    stdlib = __import__("sysconfig").get_paths()["stdlib"]
    first = open(f"{stdlib}/{files[0][0]}", "rb").read()
    assert data.startswith(first) and b"def " in data and b"import " in data


def test_stdlib_corpus_is_every_library_file_once_and_reproducible(tmp_path, monkeypatch):
    """The study corpus: every .py of the standard library (tests included) in exactly one split, chosen by a hash
    of its path, concatenated in sorted order; two builds give the same bytes, and the cache is read, not rebuilt."""
    import hashlib
    import os
    import sysconfig

    a = load_stdlib_corpus(cache_dir=tmp_path / "a")
    b = load_corpus("stdlib", cache_dir=tmp_path / "b")  # built again from the files, independently
    monkeypatch.setattr(corpus_module, "stdlib_parts", lambda *args: pytest.fail("the stdlib corpus was rebuilt"))
    assert np.array_equal(load_stdlib_corpus(cache_dir=tmp_path / "a").valid, a.valid)
    assert isinstance(a.vocab, ByteVocab) and a.metric == "bits_per_byte"
    base = sysconfig.get_paths()["stdlib"]
    expected = []  # recomputed here from the rule the docs state
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in ("site-packages", "dist-packages", "__pycache__")
                       and not d.startswith(".")]
        expected += [os.path.relpath(os.path.join(dirpath, f), base).replace(os.sep, "/") for f in filenames
                     if f.endswith(".py") and os.path.getsize(os.path.join(dirpath, f)) > 0]
    listed = {s: [f[0] for f in a.meta["splits"][s]["files"]] for s in ("train", "valid", "test")}
    assert sorted(sum(listed.values(), [])) == sorted(expected)
    for split, names in listed.items():
        assert names == sorted(names) and names
        assert all({0: "valid", 1: "test"}.get(hashlib.sha256(n.encode()).digest()[0] % 20, "train") == split
                   for n in names)
        data = b"".join(open(os.path.join(base, n), "rb").read() for n in names)
        assert np.asarray(a.split(split), dtype=np.uint8).tobytes() == data
        assert np.array_equal(a.split(split), b.split(split))
        assert a.meta["splits"][split]["sha256"] == b.meta["splits"][split]["sha256"] == \
            hashlib.sha256(data).hexdigest()
    assert any(n.startswith("test/") for n in listed["train"])  # tests included, unlike the default corpus
    assert a.train.size > 10 * (a.valid.size + a.test.size) / 2 > 0


# --------------------------------------------------------------------------------------------- user text
def write_lines(path, n, seed=0):
    rng = np.random.default_rng(seed)
    vocab = ["alpha", "beta", "gamma", "delta", "Epsilon"]
    lines = [" ".join(vocab[int(i)] for i in rng.integers(5, size=6)) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return lines


def test_text_corpus_word_level_split_and_unk(tmp_path):
    lines = write_lines(tmp_path / "train.txt", 200)
    c = load_text_corpus(tmp_path / "train.txt", cache_dir=tmp_path / "cache")
    assert isinstance(c, Corpus) and c.level == "word" and c.name == "train"
    n_eval = 200 * 5 // 100
    per_line = 7  # six words and <eos>
    assert (c.train.size, c.valid.size, c.test.size) == ((200 - 2 * n_eval) * per_line, n_eval * per_line,
                                                         n_eval * per_line)
    assert c.vocab.decode(c.test) == "\n".join(lines[-n_eval:]) + "\n"
    (tmp_path / "valid.txt").write_text("alpha omega\n", encoding="utf-8")
    c2 = load_text_corpus(tmp_path / "train.txt", valid=tmp_path / "valid.txt", cache_dir=tmp_path / "cache")
    assert c2.vocab.decode(c2.valid) == "alpha <unk>\n"  # vocabulary from train only
    assert c2.test.size == n_eval * per_line and c2.train.size == (200 - n_eval) * per_line


def test_text_corpus_cache_is_invalidated_when_the_file_changes(tmp_path):
    path = tmp_path / "t.txt"
    write_lines(path, 100, seed=1)
    first = load_text_corpus(path, level="char", cache_dir=tmp_path / "cache")
    write_lines(path, 100, seed=2)
    second = load_text_corpus(path, level="char", cache_dir=tmp_path / "cache")
    assert second.path != first.path
    assert second.vocab.decode(second.train) == path.read_text(encoding="utf-8")[: second.train.size]


@pytest.mark.parametrize("level", ["char", "byte", "bpe"])
def test_text_corpus_levels_roundtrip(tmp_path, level):
    path = tmp_path / "story.txt"
    text = "Once upon a time, naïve café owners\n  served ☕ to everyone.\n" * 60
    path.write_text(text, encoding="utf-8")
    c = load_text_corpus(path, level=level, bpe_vocab_size=300, cache_dir=tmp_path / "cache")
    assert c.level == level and c.metric == {"char": "bpc", "byte": "bits_per_byte", "bpe": "ppl"}[level]
    decoded = "".join(c.vocab.decode(c.split(s)) for s in ("train", "valid", "test"))
    assert decoded == text
    if level == "bpe":
        assert isinstance(c.vocab, BPETokenizer) and (c.path / "tokenizer.json").is_file()

