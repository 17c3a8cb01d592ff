"""``generate`` with transformers' own options, the same code on both sides of tests/hf: transformers 4.35.2 (the
judge, in the main environment) and transformers 5 (``hf5_side.py``, through ``transformer_xl.hf``). It uses only
names both versions have: a ``GenerationConfig`` (with ``no_repeat_ngram_size``), a repetition-penalty logits
processor, a stopping criterion and a streamer."""

from __future__ import annotations

import torch


def generate_with_options(model, prompt: list, new_tokens: int, stop: int) -> dict:
    """The new tokens under each option, and what the streamer got (``puts``: the prompt, then each new token;
    ``ended``). The criterion stops at token ``stop``; its ``[B]`` bool answer is what transformers 5 asks for, and
    4.35.2 reads it as one bool (batch 1)."""
    from transformers import (
        GenerationConfig,
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        StoppingCriteria,
        StoppingCriteriaList,
    )
    from transformers.generation.streamers import BaseStreamer

    class StopAt(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return input_ids[:, -1] == stop  # [B] bool

    class Collect(BaseStreamer):
        def __init__(self):
            self.puts, self.ended = [], False

        def put(self, value):
            self.puts.append(value.flatten().tolist())

        def end(self):
            self.ended = True

    ids = torch.tensor([prompt])

    def new(**kwargs) -> list:
        return model.generate(ids, pad_token_id=0, **kwargs)[0, ids.size(1):].tolist()

    streamer = Collect()
    return {"config": new(generation_config=GenerationConfig(max_new_tokens=new_tokens, do_sample=False,
                                                             no_repeat_ngram_size=2)),
            "processor": new(max_new_tokens=new_tokens, do_sample=False,
                             logits_processor=LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.5)])),
            "stopped": new(max_new_tokens=new_tokens, do_sample=False,
                           stopping_criteria=StoppingCriteriaList([StopAt()])),
            "streamed": new(max_new_tokens=new_tokens, do_sample=False, streamer=streamer),
            "puts": streamer.puts, "ended": streamer.ended}
