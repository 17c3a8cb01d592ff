"""``txl generate``: continue a prompt, printing tokens as they come.

Before any text is produced, everything that can be checked is: the device, the lengths, the ``--stop``
tokens, and the memory that decoding needs (:mod:`transformer_xl.model.footprint`).
"""

from __future__ import annotations

import logging
import sys
from typing import List


from ..errors import DataError
from ..generation import SamplingConfig, generate
from ..generation.text import StreamDecoder, encode_prompt
from ..model.config import DECODINGS
from ..model.footprint import check_decoding_fits
from .common import load_model_and_vocab, weight_bytes
from .options import INFERENCE_CHECKS, add_inference_args, at_least, checks, command, positive


log = logging.getLogger(__name__)


@command
def add_generate(sub) -> None:
    p = sub.add_parser("generate", help="continue a prompt, printing tokens as they come")
    add_inference_args(p)
    p.add_argument("--prompt", required=True, help="text to continue (read segment by segment into memory)")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--greedy", action="store_true", help="take the most likely token (no sampling)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely (0: off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1: off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0)
    p.add_argument("--seed", type=int, help="for reproducible sampling")
    p.add_argument("--stop", nargs="*", metavar="TOKEN", help="stop at these tokens (e.g. '<eos>')")
    p.add_argument("--decoding", choices=DECODINGS,
                   help="how the memory moves (default: the checkpoint's): segment, every tgt_len tokens as in "
                        "training; sliding, the prompt as one segment and then one token per step, each seeing the "
                        "mem_len states before it (HuggingFace's generate; the default of converted HF models)")
    p.set_defaults(func=run_generate,
                   **checks(*INFERENCE_CHECKS, at_least("--max-new-tokens", 1), positive("--temperature"),
                            at_least("--top-k", 0), ("--top-p", 0, 1, True), positive("--repetition-penalty"),
                            ("--seed", -(1 << 63), (1 << 64) - 1, False)))


def stop_ids(vocab, tokens) -> List[int]:
    """Ids of the ``--stop`` tokens; a token that is not one symbol of the vocabulary is a DataError."""
    ids = []
    for tok in tokens or []:
        if hasattr(vocab, "sym2idx"):  # Vocab: symbols by name
            if tok not in vocab.sym2idx:
                raise DataError(f"--stop: {tok!r} is not in the checkpoint's vocabulary")
            ids.append(vocab.sym2idx[tok])
            continue
        if tok.isdigit() and int(tok) < len(vocab):  # a token id (byte value)
            ids.append(int(tok))
            continue
        encoded = vocab.encode(tok) if tok else []
        if len(encoded) != 1:
            raise DataError(f"--stop: {tok!r} is not one token of the checkpoint's vocabulary "
                            f"(it encodes to {len(encoded)} tokens)")
        ids.append(int(encoded[0]))
    return ids


def run_generate(args) -> int:
    model, vocab = load_model_and_vocab(args.checkpoint, args.device, args.tgt_len, args.mem_len)
    ids = encode_prompt(vocab, args.prompt)
    stops = stop_ids(vocab, args.stop)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, do_sample=not args.greedy,
                              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              repetition_penalty=args.repetition_penalty, seed=args.seed, stop_tokens=stops)
    sampling.validate()
    device = next(model.parameters()).device
    check_decoding_fits(model.config, 1, model.tgt_len, model.mem_len, len(ids) + args.max_new_tokens, device,
                        extra_bytes=-weight_bytes(model))
    decoder = StreamDecoder(vocab, after_newline=args.prompt.endswith("\n"), context=ids)
    out = sys.stdout
    out.write(args.prompt)
    out.flush()

    def on_token(_step, tokens):
        out.write(decoder.piece(int(tokens[0])))
        out.flush()

    generate(model, [ids], sampling, on_token=on_token, decoding=args.decoding)
    out.write(decoder.flush())  # text held back until the next token (e.g. a trailing " @,@ ")
    out.write("\n")
    return 0
