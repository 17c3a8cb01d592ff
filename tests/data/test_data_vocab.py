"""Vocabulary semantics (the original utils/vocabulary.py rules), byte vocab, BPE, persistence."""

import json
from collections import Counter

import numpy as np
import pytest
from data_fixtures import one_line

from transformer_xl.data import BPETokenizer, ByteVocab, Vocab, load_vocab
from transformer_xl.errors import DataError

TEXT = "b a c\na c d\ne\n"  # counts: a 2, c 2, b 1, d 1, e 1, <eos> 3; first seen: b a c <eos> d e


def word_vocab(text=TEXT, **kw):
    kw.setdefault("special", ["<eos>"])
    kw.setdefault("add_eos", True)
    v = Vocab(**kw)
    v.count_text(text)
    return v.build_vocab()


def test_specials_first_then_by_count_ties_in_first_seen_order():
    v = word_vocab()
    # '<eos>' (special) first; a and c (2 each) in first-seen order a, c; then b, d, e (1 each) as first seen.
    assert v.idx2sym == ["<eos>", "a", "c", "b", "d", "e"]
    assert v.sym2idx == {s: i for i, s in enumerate(v.idx2sym)}


def test_order_matches_counter_most_common():
    words = "x y z y z z w w w w q".split()
    v = Vocab()
    v.count_text(" ".join(words))
    v.build_vocab()
    assert v.idx2sym == [s for s, _ in Counter(words).most_common()]


def test_min_freq_and_max_size():
    assert word_vocab(min_freq=2).idx2sym == ["<eos>", "a", "c"]
    # max_size bounds most_common(); a counted special takes one of those places, as in the original.
    assert word_vocab(max_size=3).idx2sym == ["<eos>", "a", "c"]
    assert word_vocab(special=[], add_eos=False, max_size=2).idx2sym == ["a", "c"]


def test_lower_case_merges_and_strips():
    v = word_vocab("  The the THE  \ncat\n", lower_case=True)
    assert "the" in v and "The" not in v
    assert v.counter["the"] == 3
    assert list(v.encode("THE Cat")) == [v.sym2idx["the"], v.sym2idx["cat"], v.sym2idx["<eos>"]]


def test_add_eos_per_line_including_blank_and_unterminated_lines():
    v = word_vocab()
    e = v.sym2idx["<eos>"]
    ids = v.encode("b a\n\nc")
    assert list(ids) == [v.sym2idx["b"], v.sym2idx["a"], e, e, v.sym2idx["c"], e]
    assert ids.dtype == np.int64
    assert list(v.encode(["b a", "", "c"])) == list(ids)  # a list of lines is the same text
    assert list(v.encode("b a\r\n\rc\r\n")) == list(ids)  # universal newlines, as text-mode reading


def test_unknown_maps_to_unk_when_present():
    v = word_vocab(special=["<eos>", "<unk>"])
    assert list(v.encode("a zebra")) == [v.sym2idx["a"], v.sym2idx["<unk>"], v.sym2idx["<eos>"]]


def test_unknown_without_unk_raises_naming_the_symbol():
    v = word_vocab()
    with pytest.raises(DataError) as info:
        v.encode("a zebra")
    assert "zebra" in one_line(info.value)


def test_word_decode_joins_with_spaces_and_eos_is_newline():
    v = word_vocab()
    assert v.decode(v.encode("b a\nc d\n")) == "b a\nc d\n"
    assert v.decode([v.sym2idx["a"], v.sym2idx["c"]]) == "a c"


def test_char_level_per_line_like_the_original():
    v = Vocab(delimiter="", add_eos=True, special=["<eos>"])
    assert v.level == "char"
    v.count_text(" ab \nba\n")
    v.build_vocab()
    assert v.idx2sym == ["<eos>", "a", "b"]  # lines stripped; a, b twice each, a seen first
    assert v.decode(v.encode("ab\nb")) == "ab\nb\n"


def test_char_level_whole_text_keeps_every_character():
    text = "To be,\n  or not.\n"
    v = Vocab(level="char", split_lines=False)
    v.count_text(text)
    v.build_vocab()
    assert set(v.idx2sym) == set(text)
    assert v.decode(v.encode(text)) == text


def test_byte_level_symbols_are_decimal_values_and_newlines_separate_lines():
    data = "é\nab\n".encode("utf-8")
    v = Vocab(level="byte")
    v.count_text(data)
    v.build_vocab()
    assert set(v.idx2sym) == {str(b) for b in data if b != 10}
    ids = v.encode(data)
    assert [int(v.idx2sym[i]) for i in ids] == [b for b in data if b != 10]
    assert v.decode(v.encode("é".encode("utf-8"))) == "é"
    with_eos = Vocab(level="byte", add_eos=True, special=["<eos>"])
    with_eos.count_text(data)
    with_eos.build_vocab()
    assert with_eos.decode(with_eos.encode(data)) == data.decode("utf-8")


def test_save_load_json_roundtrip(tmp_path):
    v = word_vocab("The cat\nthe Dog\n", lower_case=True, special=["<eos>", "<unk>"])
    path = v.save(tmp_path)
    assert path.name == "vocab.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["level"] == "word" and saved["symbols"] == v.idx2sym
    w = load_vocab(tmp_path)
    assert isinstance(w, Vocab) and w.idx2sym == v.idx2sym
    text = "THE DOG\nthe bird\n"
    assert list(w.encode(text)) == list(v.encode(text))
    assert Vocab.load(path).idx2sym == v.idx2sym


def test_vocab_file_like_lm1b(tmp_path):
    vf = tmp_path / "1b_word_vocab.txt"
    vf.write_text("the 10\n<S> 9\n<UNK> 0\ncat 3\n", encoding="utf-8")
    v = Vocab(add_double_eos=True, vocab_file=vf).build_vocab()
    assert v.idx2sym == ["the", "<S>", "<UNK>", "cat"]
    s, u = v.sym2idx["<S>"], v.sym2idx["<UNK>"]
    assert list(v.encode("the dog\n")) == [s, v.sym2idx["the"], u, s]
    assert v.decode(v.encode("the cat\ncat\n")) == "the cat\ncat\n"
    vf.write_text("the 1\n\n<UNK> 0\n", encoding="utf-8")
    with pytest.raises(DataError) as info:
        Vocab(add_double_eos=True, vocab_file=vf).build_vocab()
    assert "line 2" in one_line(info.value)


def test_byte_vocab():
    bv = ByteVocab()
    assert len(bv) == 256 and bv.level == "byte"
    assert list(bv.encode("é")) == list("é".encode("utf-8"))
    assert bv.decode([0x68, 0x69]) == "hi"
    assert bv.decode([0xFF, 0x68]) == "\ufffdh"
    with pytest.raises(DataError):
        bv.decode([256])


def test_byte_vocab_save_load(tmp_path):
    ByteVocab().save(tmp_path / "v.json")
    assert isinstance(load_vocab(tmp_path / "v.json"), ByteVocab)


TRAIN_TEXT = ("the quick brown fox jumps over the lazy dog\n" * 20 + "naïve café ☕ déjà vu\n" * 10 +
              "\n".join(f"line {i} of the corpus, with words" for i in range(50)) + "\n")


def test_bpe_roundtrip_save_load_and_determinism(tmp_path):
    tok = BPETokenizer.train([TRAIN_TEXT], vocab_size=300)
    assert tok.level == "bpe" and 256 < len(tok) <= 300
    sample = "the lazy café fox ☕\n\nunseen wörds\n"
    ids = tok.encode(sample)
    assert ids.dtype == np.int64 and len(ids) < len(sample.encode("utf-8"))
    assert tok.decode(ids) == sample
    path = tok.save(tmp_path)
    assert path.name == "tokenizer.json"
    loaded = load_vocab(tmp_path)
    assert isinstance(loaded, BPETokenizer) and list(loaded.encode(sample)) == list(ids)
    again = BPETokenizer.train([TRAIN_TEXT], vocab_size=300)
    assert list(again.encode(TRAIN_TEXT)) == list(tok.encode(TRAIN_TEXT))


def test_bpe_too_small_vocab():
    with pytest.raises(DataError):
        BPETokenizer.train(["abc"], vocab_size=100)


def test_load_vocab_errors(tmp_path):
    with pytest.raises(DataError):
        load_vocab(tmp_path / "nope.json")
    with pytest.raises(DataError):
        load_vocab(tmp_path)  # a directory without a vocabulary
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataError) as info:
        load_vocab(bad)
    one_line(info.value)


def test_bad_level():
    with pytest.raises(DataError):
        Vocab(level="sentence")


def test_explicit_delimiter_splits_stripped_lines():
    v = Vocab(delimiter=",")
    assert v.tokenize("  a,b,,c \n") == ["a", "b", "", "c"]  # strip first, then str.split(',') as the original


def test_streamed_reading_keeps_offsets_and_newlines_across_blocks(tmp_path):
    from transformer_xl import _io

    raw = ("line one\r\nzwei\rdrei é\n" * 40).encode("utf-8")
    path = tmp_path / "t.txt"
    path.write_bytes(raw)
    blocks = list(_io.iter_text_blocks(path, block_size=7))
    assert len(blocks) > 10 and all(b.endswith("\n") for b in blocks[:-1])
    assert "".join(blocks) == raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    bad = raw + b"x\xc3(" + raw
    path.write_bytes(bad)
    with pytest.raises(DataError) as info:
        list(_io.iter_text_blocks(path, block_size=7))
    assert f"byte offset {len(raw) + 1}" in one_line(info.value)


def test_every_tokenizer_offers_the_common_interface(tmp_path):
    from transformer_xl.data import Tokenizer

    vocab = word_vocab()
    for tok in (vocab, ByteVocab(), BPETokenizer.train([TRAIN_TEXT], vocab_size=280)):
        assert isinstance(tok, Tokenizer)
        directory = tmp_path / tok.kind
        tok.save(directory)
        restored = load_vocab(directory)
        assert restored.level == tok.level and len(restored) == len(tok)
        assert restored.to_dict() == tok.to_dict()
