"""``txl convert``: original, HuggingFace and TensorFlow checkpoints into a transformer-xl checkpoint directory.
"""

from __future__ import annotations



from ..convert import convert_checkpoint, convert_tf_checkpoint
from ..data import original_vocab, read_hf_vocab
from ..errors import ConfigError
from .options import command


@command
def add_convert(sub) -> None:
    p = sub.add_parser("convert", help="convert an original, HuggingFace or TensorFlow Transformer-XL checkpoint",
                       description="Convert a state dict (.bin or .safetensors) saved by the original Transformer-XL "
                                   "code (MemTransformerLM) or by HuggingFace TransfoXLLMHeadModel, or a checkpoint of "
                                   "the authors' TensorFlow code (read without TensorFlow), into a transformer-xl "
                                   "checkpoint directory (config.json + model.safetensors, and vocab.json with "
                                   "--vocab or --vocab-from-corpus).")
    p.add_argument("state_dict", help="the state dict file (.bin, .pt or .safetensors); for --from tf the checkpoint "
                                      "prefix (e.g. model.ckpt-0, beside model.ckpt-0.index)")
    p.add_argument("out_dir", help="directory to write")
    p.add_argument("--from", dest="source", choices=["original", "hf", "tf"], required=True,
                   help="who wrote the checkpoint")
    p.add_argument("--config", required=True, metavar="ARGS.json",
                   help="constructor arguments under their original names (a HuggingFace config.json for --from hf; "
                        "for --from tf the authors' run flags as JSON, or a built-in config name: "
                        "docs/TF_CHECKPOINTS.md)")
    p.add_argument("--vocab", metavar="VOCAB.pkl",
                   help="--from hf: HuggingFace's vocab.pkl/vocab.bin, read without running it (no unpickling), "
                        "written as vocab.json")
    p.add_argument("--vocab-from-corpus", metavar="NAME", choices=["wt103", "wt2", "ptb", "enwik8", "text8", "lm1b"],
                   help="--from original|tf: rebuild the authors' vocabulary of this corpus (needs --data-dir)")
    p.add_argument("--data-dir", metavar="DIR", help="the corpus directory for --vocab-from-corpus")
    p.set_defaults(func=run_convert)


def run_convert(args) -> int:
    if args.vocab and args.vocab_from_corpus:
        raise ConfigError("--vocab and --vocab-from-corpus: give one of them")
    vocab = None
    if args.vocab:

        if args.source != "hf":
            raise ConfigError("--vocab: a HuggingFace vocab.pkl goes with --from hf "
                              "(original and TensorFlow checkpoints: --vocab-from-corpus NAME --data-dir DIR)")
        vocab = read_hf_vocab(args.vocab)
    elif args.vocab_from_corpus:

        if not args.data_dir:
            raise ConfigError("--vocab-from-corpus: needs --data-dir DIR holding the corpus")
        vocab = original_vocab(args.vocab_from_corpus, args.data_dir)
    if args.source == "tf":
        model = convert_tf_checkpoint(args.state_dict, args.config, args.out_dir, vocab=vocab)
    else:
        model = convert_checkpoint(args.state_dict, args.config, args.out_dir, source=args.source, vocab=vocab)
    extra = f", vocabulary of {len(vocab):,} symbols" if vocab is not None else ""
    print(f"wrote {args.out_dir} ({model.num_parameters():,} parameters, attn_type={model.config.attn_type}{extra})")
    return 0
