#!/usr/bin/env bash
# The ablation of docs/RESULTS.md: Transformer-XL vs the vanilla Transformer vs recurrence with absolute
# positions, on PTB and WikiText-2, at equal parameter count, segment length and step budget.
# Usage: bash benchmarks/ablation.sh [DATA_DIR]   (DATA_DIR holds ptb/ and wikitext-2/; default ../shared/data)
set -euo pipefail
data=${1:-${TXL_DATA_DIR:-../shared/data}}
out=runs/ablation
mkdir -p "$out"
for ds in ptb wt2; do
  dir=ptb; [ "$ds" = wt2 ] && dir=wikitext-2
  for kind in xl vanilla absmem; do
    start=$(date +%s)
    txl train --config "ablation_${ds}_${kind}" --data-dir "$data/$dir" --progress false --tensorboard false \
      > "$out/${ds}_${kind}.log" 2>&1
    echo "${ds}_${kind} train seconds=$(( $(date +%s) - start ))" | tee -a "$out/times.txt"
  done
  # validation perplexity, every method on the same tokens: the first 31 segments of 64 tokens
  # (1,984 predictions) of each of the 10 rows of the validation stream, 19,840 tokens in all
  seg="--split valid --batch-size 10 --max-steps 31 --json"
  txl eval "$out/${ds}_xl" $seg > "$out/${ds}_xl.eval.json"
  txl eval "$out/${ds}_absmem" $seg > "$out/${ds}_absmem.eval.json"
  txl eval "$out/${ds}_vanilla" $seg --mode segment > "$out/${ds}_vanilla.segment.json"
  txl eval "$out/${ds}_vanilla" --split valid --batch-size 10 --mode sliding --max-steps 1984 --json \
    > "$out/${ds}_vanilla.sliding.json"
  # Transformer-XL and recurrence-with-absolute-positions across evaluation memory lengths
  for kind in xl absmem; do
    for mem in 0 32 64 128 256 512; do
      txl eval "$out/${ds}_${kind}" $seg --mem-len "$mem" > "$out/${ds}_${kind}.mem${mem}.json"
    done
  done
  # loss against context length, and RECL of the group
  tokens=400; [ "$ds" = wt2 ] && tokens=200
  txl context "$out/${ds}_xl" "$out/${ds}_absmem" "$out/${ds}_vanilla" --names xl absmem vanilla \
    --lengths 16 32 64 128 256 --max-tokens "$tokens" --plot "docs/context_${ds}.png" > "$out/${ds}_context.txt"
done
txl bench eval-speed --attn-lens 128 256 512 1024 --plot docs/eval_speed.png | tee "$out/eval_speed.txt"
