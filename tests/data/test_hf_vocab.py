"""HuggingFace ``vocab.pkl`` read without running it, judged against transformers' own TransfoXLTokenizer.

The oracle is HuggingFace's tokenizer (transformers 4.35.2, a test-only extra): its ``save_vocabulary`` writes
the pickle, its ``sym2idx`` gives the ids and its Moses detokenizer (``convert_tokens_to_string``) the text.
(Its ``convert_tokens_to_ids``/``decode`` are not used: the added-token table shadows ids 0-2 there.)
"""

from __future__ import annotations

import io
import os
import pickle
import warnings
import zipfile

import pytest
from data_fixtures import one_line

from transformer_xl.data import HFVocab, Vocab, load_plain_pickle, load_vocab, read_hf_vocab
from transformer_xl.errors import DataError
from transformer_xl.text.tokenizer import StreamDecoder, encode_prompt

transformers = pytest.importorskip("transformers")
pytest.importorskip("sacremoses")

CORPUS = """The company 's 1,000 workers earned 3.5 million dollars in 1999-2000 .
" It is a well-known fact , " he said ; ( really ) ! <unk> words are rare .
Prices rose 12.5 % to $ 4,500.25 on May 1 – 2 , and the U.S. economy grew .
She said : ' don't go ' … and left — quickly , 2-3 times .
"""

PROBES = [
    "The company's 2,000 workers earned 3.5 million dollars in 1-2 days.",
    'He said "it is a well-known fact", then left (quickly)!',
    "Prices rose 12.5% to $4,500.25 on May 1–2, and the U.S. economy grew 3.14159 times.",
    "She said: 'don't go'... and left — UNKNOWNWORD zyx <unk>b <formula> tail",
    "  leading and trailing spaces  ",
    "THE COMPANY Workers EARNED",
    "Shouting<EOS>and <UNK>here <Formula> done",
]


def _hf_tokenizer(tmp_path, lower_case: bool, special=("<eos>", "<unk>")):
    """A TransfoXLTokenizer counted on CORPUS by HuggingFace itself, and the vocab.pkl it saved."""
    from transformers import TransfoXLTokenizer
    from transformers.utils import logging

    logging.set_verbosity_error()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tok = TransfoXLTokenizer(special=list(special), lower_case=lower_case)
        tok.count_file(str(corpus))
        tok.build_vocab()
        (path,) = tok.save_vocabulary(str(tmp_path))
    return tok, path


def _hf_ids(tok, tokens):
    """HuggingFace's ids judged by its sym2idx (unknown -> its unk_idx), as its _convert_token_to_id does."""
    return [tok._convert_token_to_id(t) for t in tokens]


def _hf_text(tok, syms):
    """HuggingFace's Moses detokenization of each <eos>-separated line, lines joined by newlines."""
    lines, line = [], []
    for s in syms + ["<eos>"]:
        if s == "<eos>":
            lines.append(tok.convert_tokens_to_string(line))
            line = []
        else:
            line.append(s)
    return "\n".join(lines)


@pytest.fixture(params=[False, True], ids=["cased", "lower_case"])
def hf_pair(request, tmp_path):
    tok, path = _hf_tokenizer(tmp_path, lower_case=request.param)
    return tok, read_hf_vocab(path)


def test_symbol_table_and_settings_match_huggingface(hf_pair):
    tok, vocab = hf_pair
    assert isinstance(vocab, HFVocab) and isinstance(vocab, Vocab)
    assert vocab.sym2idx == dict(tok.sym2idx)
    assert vocab.idx2sym == [s for s, _ in sorted(tok.sym2idx.items(), key=lambda kv: kv[1])]
    assert vocab.lower_case == tok.lower_case and vocab.special == tok.special
    assert vocab.unk_idx == tok.unk_idx and vocab.never_split == list(tok.never_split)


@pytest.mark.parametrize("text", PROBES)
def test_tokens_ids_and_text_match_huggingface(hf_pair, text):
    tok, vocab = hf_pair
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_tokens = tok.tokenize(text)
    assert vocab.words(text) == hf_tokens
    ids = vocab.encode(text).tolist()
    assert ids == _hf_ids(tok, hf_tokens) + [vocab.sym2idx["<eos>"]]  # a line of the corpus ends with <eos>
    assert encode_prompt(vocab, text) == _hf_ids(tok, hf_tokens)  # an unfinished prompt line does not
    line_ids = ids[:-1]
    expected = _hf_text(tok, [vocab.idx2sym[i] for i in line_ids])
    assert vocab.decode(line_ids) == expected
    assert vocab.decode(ids) == expected + "\n"


def test_numbers_and_dashes_are_split_the_wikitext_way(hf_pair):
    tok, vocab = hf_pair
    text = "1,000 workers , 3.5 million dollars , 2-3 times"
    words = vocab.words(text)
    assert words == tok.tokenize(text)
    assert words[:3] == ["1", "@,@", "000"] and words[5:8] == ["3", "@.@", "5"]
    assert words[-4:-1] == ["2", "@-@", "3"]
    assert vocab.decode(vocab.encode(text)[:-1]) == "1,000 workers, 3.5 million dollars, 2-3 times"


def test_json_roundtrip_keeps_tokenization(hf_pair, tmp_path):
    tok, vocab = hf_pair
    vocab.save(tmp_path / "out")
    restored = load_vocab(tmp_path / "out")
    assert isinstance(restored, HFVocab) and restored.idx2sym == vocab.idx2sym
    for text in PROBES:
        assert restored.encode(text).tolist() == vocab.encode(text).tolist()


def test_stream_decoder_reads_like_the_detokenizer(hf_pair):
    tok, vocab = hf_pair
    text = PROBES[2] + "\n" + PROBES[1]
    ids = vocab.encode(text).tolist()
    decoder = StreamDecoder(vocab)
    pieces = [decoder.piece(i) for i in ids]
    streamed = "".join(pieces) + decoder.flush()
    assert streamed == vocab.decode(ids)
    lines = [tok.convert_tokens_to_string([vocab.idx2sym[i] for i in _hf_ids(tok, tok.tokenize(t))])
             for t in (PROBES[2], PROBES[1])]
    assert streamed == lines[0] + "\n" + lines[1] + "\n"
    # a continuation of the prompt's last line: the first word joins it with a space, "," attaches
    cont = vocab.encode("rose , fact")[:-1].tolist()
    decoder = StreamDecoder(vocab, after_newline=False, context=vocab.encode("Prices")[:-1].tolist())
    assert "".join(decoder.piece(i) for i in cont) + decoder.flush() == " rose, fact"


def test_legacy_and_zip_torch_containers(tmp_path):
    torch = pytest.importorskip("torch")
    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    plain = {"sym2idx": dict(tok.sym2idx), "idx2sym": list(tok.idx2sym), "lower_case": False}
    torch.save(plain, tmp_path / "zip.bin")
    torch.save(plain, tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    for name in ("zip.bin", "legacy.bin"):
        assert read_hf_vocab(tmp_path / name).idx2sym == read_hf_vocab(path).idx2sym


# ---------------------------------------------------------------------------------------------- malicious input
class _System:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _Exec:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("payload", [_System, _Exec], ids=["os.system", "builtins.exec"])
@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_reduce_payload_runs_nothing_and_is_refused(tmp_path, payload, protocol):
    marker = tmp_path / "pwned"
    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    state = {"sym2idx": dict(tok.sym2idx), "idx2sym": list(tok.idx2sym), "x": payload(marker)}
    evil = tmp_path / "vocab_evil.pkl"
    evil.write_bytes(pickle.dumps(state, protocol=protocol))
    with pytest.raises(DataError) as err:
        read_hf_vocab(evil)
    msg = one_line(err.value)
    assert ("system" in msg or "exec" in msg) and "refusing" in msg
    assert not marker.exists()


def test_payload_inside_a_real_huggingface_pickle_and_a_torch_zip(tmp_path):
    marker = tmp_path / "pwned"
    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    state = pickle.loads(open(path, "rb").read())  # the test trusts its own file
    state["counter"] = _System(marker)
    (tmp_path / "a.pkl").write_bytes(pickle.dumps(state))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"sym2idx": {"a": 0}, "x": _Exec(marker)}))
    (tmp_path / "b.bin").write_bytes(buf.getvalue())
    for name in ("a.pkl", "b.bin"):
        with pytest.raises(DataError) as err:
            read_hf_vocab(tmp_path / name)
        assert "refusing" in one_line(err.value)
    assert not marker.exists()


def test_truncated_foreign_and_tensor_pickles_get_one_line(tmp_path):
    torch = pytest.importorskip("torch")
    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    data = open(path, "rb").read()
    (tmp_path / "truncated.pkl").write_bytes(data[: len(data) // 2])
    (tmp_path / "list.pkl").write_bytes(pickle.dumps([1, 2, 3]))
    (tmp_path / "empty_dict.pkl").write_bytes(pickle.dumps({"lower_case": True}))
    (tmp_path / "text.pkl").write_text("not a pickle at all\n")
    torch.save({"w": torch.zeros(2)}, tmp_path / "tensor.bin")
    expected = {"truncated.pkl": "truncated", "list.pkl": "not a Transformer-XL tokenizer",
                "empty_dict.pkl": "not a Transformer-XL tokenizer", "text.pkl": "pickle",
                "tensor.bin": "refusing"}
    for name, words in expected.items():
        with pytest.raises(DataError) as err:
            read_hf_vocab(tmp_path / name)
        assert words in one_line(err.value), name
    with pytest.raises(DataError):
        read_hf_vocab(tmp_path / "missing.pkl")


def test_inert_placeholders_import_nothing(tmp_path):
    """sacremoses/transformers objects in the pickle become placeholders: their modules are never imported."""
    import sys

    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    state = load_plain_pickle(path)
    assert type(state["moses_tokenizer"]).__name__ == "Inert"
    assert state["moses_tokenizer"].global_name == "sacremoses.tokenize.MosesTokenizer"
    assert state["punctuation_with_space_around_pattern"].global_name == "re._compile"
    # a module of an inert family that does not even exist is never looked up (importing it would fail)
    raw = b"(dp0\nVsym2idx\n(dVa\nI0\nssVx\nctransformers.does_not_exist\nEvil\n(tRs."
    (tmp_path / "fake.pkl").write_bytes(raw)
    state = load_plain_pickle(tmp_path / "fake.pkl")
    assert state["x"].global_name == "transformers.does_not_exist.Evil"
    assert "transformers.does_not_exist" not in sys.modules
    assert read_hf_vocab(tmp_path / "fake.pkl").idx2sym == ["a"]


def test_load_vocab_reads_a_folders_vocab_pkl_without_unpickling(tmp_path):
    """A HuggingFace folder's vocab.pkl is read by the non-executing reader (HuggingFace's ids); the original
    code's plain-text ``vocab_file`` reader still explains that a pickle is not a symbol list."""
    tok, path = _hf_tokenizer(tmp_path, lower_case=False)
    for source in (tmp_path, path):  # a directory with vocab.pkl and no vocab.json, and the file itself
        vocab = load_vocab(source)
        assert isinstance(vocab, HFVocab) and vocab.sym2idx == tok.sym2idx
    with pytest.raises(DataError) as err:
        Vocab(vocab_file=path).build_vocab()
    msg = one_line(err.value)
    assert "pickle" in msg and "level='byte'" not in msg


def test_missing_sacremoses_is_one_line(monkeypatch, hf_pair):
    import builtins

    from transformer_xl.text import hf_vocab

    tok, vocab = hf_pair
    real_import = builtins.__import__

    def no_sacremoses(name, *args, **kwargs):
        if name == "sacremoses":
            raise ImportError("no sacremoses")
        return real_import(name, *args, **kwargs)

    hf_vocab.moses.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_sacremoses)
    try:
        with pytest.raises(DataError) as err:
            vocab.encode("some words")
        assert 'pip install "transformer-xl[hf]"' in one_line(err.value)
    finally:
        monkeypatch.undo()
        hf_vocab.moses.cache_clear()
