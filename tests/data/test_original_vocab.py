"""The original code's vocabularies (``original_vocab``), judged by HuggingFace's port of the original ``Vocab``.

HuggingFace's TransfoXLTokenizer keeps the original's ``_tokenize`` (strip, lower-case), ``count_sents``,
``build_vocab`` (specials, ``Counter.most_common``, ``min_freq``/``max_size``) and ``_build_from_file``; only
its word split was replaced by the Moses pipeline. The oracle puts the original's split back
(``line.split(delimiter)``, the expression of ``utils/vocabulary.py``) and counts the files the original
``Corpus`` counts, in its order.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import List, Sequence

import pytest
from data_fixtures import one_line, require

from transformer_xl.data import ORIGINAL_CORPORA, load_corpus, original_vocab
from transformer_xl.errors import DataError

pytest.importorskip("transformers")
pytest.importorskip("sacremoses")


def hf_original(files: Sequence[Path], **kwargs):
    """HuggingFace's Vocab port with the original whitespace split, counting ``files`` in order."""
    from transformers import TransfoXLTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = TransfoXLTokenizer(**kwargs)
    tok.moses_pipeline = lambda line: line.split(tok.delimiter)
    for path in files:
        with open(path, encoding="utf-8") as f:
            tok.count_sents([tok._tokenize(line) for line in f])
    tok.build_vocab()
    return tok


def table(tok) -> List[str]:
    return [s for s, _ in sorted(tok.sym2idx.items(), key=lambda kv: kv[1])]


@pytest.mark.parametrize("name,subdir,files,lower_case", [
    ("ptb", "ptb", ["ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"], True),
    ("wt2", "wikitext-2", ["train.txt", "valid.txt", "test.txt"], False),
])
def test_real_corpora_match_the_original_rules(name, subdir, files, lower_case, request):
    data_dir = require(subdir)
    tok = hf_original([data_dir / f for f in files], special=["<eos>"], lower_case=lower_case)
    vocab = original_vocab(name, data_dir)
    assert vocab.idx2sym == table(tok)
    # ids of a whole split: each line's symbols then <eos>, as the original encode_file(add_eos=True)
    expected = []
    with open(data_dir / files[1], encoding="utf-8") as f:
        for line in f:
            expected += [tok._convert_token_to_id(s) for s in tok._tokenize(line) + ["<eos>"]]
    assert vocab.encode_file(data_dir / files[1]).tolist() == expected
    # `txl train --dataset NAME` builds the same table
    corpus = request.getfixturevalue(name)
    assert corpus.vocab.idx2sym == vocab.idx2sym
    assert corpus.valid.tolist() == expected


def _write_splits(directory: Path, texts: dict, names=("train", "valid", "test")) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for split in names:
        (directory / f"{split}.txt").write_text(texts[split], encoding="utf-8")


def test_wt103_counts_train_only(tmp_path):
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    texts = {s: "".join(" ".join(rng.choices(words, k=rng.randint(0, 12))) + " \n" for _ in range(60))
             for s in ("train", "valid", "test")}
    texts["valid"] += "only_in_valid only_in_valid only_in_valid\n"
    for folder in ("wikitext-103", "wikitext-2"):  # getdata.sh's layout: data/wikitext-103/train.txt ...
        _write_splits(tmp_path / folder, texts)
    tok = hf_original([tmp_path / "wikitext-103" / "train.txt"], special=["<eos>"], lower_case=False)
    vocab = original_vocab("wt103", tmp_path)
    assert vocab.idx2sym == table(tok) and "only_in_valid" not in vocab
    assert table(hf_original([tmp_path / "wikitext-2" / f"{s}.txt" for s in ("train", "valid", "test")],
                             special=["<eos>"], lower_case=False)) == original_vocab("wt2", tmp_path).idx2sym


def _skewed(rng: random.Random, alphabet: Sequence, n: int) -> list:
    weights = [1.0 / (i + 1) for i in range(len(alphabet))]
    return rng.choices(list(alphabet), weights=weights, k=n)


def _prep(raw, fmt) -> dict:
    """The original prep_enwik8.py / prep_text8.py, with its 5,000,000 (5% of 100M) scaled to 5% of ``raw``."""
    n = len(raw) * 5 // 100
    parts = {"train": raw[: -2 * n], "valid": raw[-2 * n: -n], "test": raw[-n:]}
    return {k: fmt(v) for k, v in parts.items()}


def test_enwik8_from_raw_and_from_prep_script_output(tmp_path):
    rng = random.Random(1)
    raw = bytes(_skewed(rng, list(range(32, 127)) + [10, 195, 169, 0, 255], 40_000))
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "enwik8").write_bytes(raw)
    prepped = _prep(raw, lambda part: " ".join(str(c) if c != ord("\n") else "\n" for c in part))
    _write_splits(tmp_path / "prep", prepped)
    tok = hf_original([tmp_path / "prep" / f"{s}.txt" for s in ("train", "valid", "test")], lower_case=True)
    for data_dir in (tmp_path / "raw", tmp_path / "prep"):
        vocab = original_vocab("enwik8", data_dir, cache_dir=tmp_path / "cache")
        assert vocab.level == "byte" and vocab.idx2sym == table(tok), data_dir
    corpus = load_corpus("enwik8", data_dir=tmp_path / "raw", cache_dir=tmp_path / "cache")
    assert corpus.vocab.idx2sym == table(tok)


def test_text8_from_raw_and_from_prep_script_output(tmp_path):
    rng = random.Random(2)
    raw = " " + "".join(_skewed(rng, list("etaoinshrdlu cmfwypvbgkjqxz"), 40_000)) + " "
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "text8").write_text(raw, encoding="utf-8")
    prepped = _prep(raw, lambda part: " ".join("_" if c == " " else c for c in part.strip()))
    _write_splits(tmp_path / "prep", prepped)
    tok = hf_original([tmp_path / "prep" / f"{s}.txt" for s in ("train", "valid", "test")], lower_case=True)
    expected = [" " if s == "_" else s for s in table(tok)]  # the original's "_" stands for a space
    for data_dir in (tmp_path / "raw", tmp_path / "prep"):
        vocab = original_vocab("text8", data_dir, cache_dir=tmp_path / "cache")
        assert vocab.level == "char" and vocab.idx2sym == expected, data_dir
    corpus = load_corpus("text8", data_dir=tmp_path / "raw", cache_dir=tmp_path / "cache")
    assert corpus.vocab.idx2sym == expected


def test_lm1b_vocabulary_file_order(tmp_path):
    lines = ["<S> 0", "</S> 0", "<UNK> 0", "the 9", "cat 5", "the 3", "dog 1"]  # a repeated word keeps its first id
    (tmp_path / "one-billion-words").mkdir()
    vocab_file = tmp_path / "one-billion-words" / "1b_word_vocab.txt"
    vocab_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    from transformers import TransfoXLTokenizer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = TransfoXLTokenizer(special=[], lower_case=False, vocab_file=str(vocab_file))
    vocab = original_vocab("lm1b", tmp_path)
    assert vocab.idx2sym == table(tok) and vocab.unk_idx == tok.unk_idx
    assert vocab.encode("the zebra").tolist() == [0, tok.sym2idx["the"], tok.unk_idx, 0]


def test_errors_are_one_line(tmp_path):
    with pytest.raises(DataError) as err:
        original_vocab("wt3", tmp_path)
    assert all(n in one_line(err.value) for n in ORIGINAL_CORPORA)
    with pytest.raises(DataError) as err:
        original_vocab("ptb", tmp_path / "missing")
    one_line(err.value)
    for name in ORIGINAL_CORPORA:
        with pytest.raises(DataError) as err:
            original_vocab(name, tmp_path)
        one_line(err.value)
    _write_splits(tmp_path / "bad", {"train": "x y\n", "valid": "1 2\n", "test": "3\n"})
    with pytest.raises(DataError) as err:
        original_vocab("enwik8", tmp_path / "bad")
    assert "prep_enwik8" in one_line(err.value)
