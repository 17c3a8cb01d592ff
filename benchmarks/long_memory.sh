#!/usr/bin/env bash
# Memory past the training length (docs/RESULTS.md, section 3): does a Transformer-XL trained on segments
# of L = 64 bytes with memory 64 keep gaining as the evaluation memory grows to 32L, where the vanilla
# Transformer cannot see past its window? Three byte-level models on the built-in corpus of Python
# standard-library source (built from the running interpreter's own files: no download, no cache needed),
# same parameter count, step budget, batch, optimiser and seed:
#   xl       Transformer-XL (attn_type 0, relative positions, tgt_len = mem_len = 64)
#   vanilla  absolute positions, no memory, windows of 64
#   absmem   absolute positions with memory 64
# Usage: bash benchmarks/long_memory.sh [OUT_DIR]   (default runs/longmem; run from the repository root,
# with the package installed or PYTHONPATH=src). About 90 minutes on 2 CPU cores. docs/RESULTS.md was
# made with OMP_NUM_THREADS=1 (the machine was shared; 2 threads stalled against other jobs): xl 1,347 s,
# vanilla 898 s, absmem 1,000 s of training, 1,143 s of analysis and 645 s of txl context.
set -euo pipefail
out=${1:-runs/longmem}
mkdir -p "$out"
py=${PYTHON:-python}

for kind in xl vanilla absmem; do
  start=$(date +%s)
  txl train --config "longmem_${kind}" --run-dir "$out/$kind" --progress false --tensorboard false \
    > "$out/${kind}.train.log" 2>&1
  echo "${kind} train seconds=$(( $(date +%s) - start ))" | tee -a "$out/times.txt"
done

# Every setting on the same validation tokens: 8 rows x the first 8,192 predictions = 65,536 bytes.
# xl at M = 0, L, ..., 32L, with and without same_length, unclamped and with clamp_len 2L;
# absmem at M = 0 ... 8L; vanilla with sliding windows of L. Prints the tables of docs/RESULTS.md.
start=$(date +%s)
"$py" benchmarks/repeat_analysis.py "$out/xl" "$out/vanilla" "$out/absmem" --batch-size 8 --max-tokens 8192 \
  --ngram 8 16 --out "$out/analysis" --plot-prefix docs/longmem | tee "$out/analysis.md"
echo "analysis seconds=$(( $(date +%s) - start ))" | tee -a "$out/times.txt"

# Cross-check with `txl eval` on the same tokens (8 rows x 128 segments of 64): must equal the table's entries
seg="--split valid --batch-size 8 --max-steps 128 --json"
txl eval "$out/xl" $seg > "$out/xl.eval.M64.json"
txl eval "$out/xl" $seg --mem-len 2048 --same-length --clamp-len 128 > "$out/xl.eval.M2048.sl.clamp128.json"

# Loss against context length and RECL of the three models (txl context: xl with same_length and memory c,
# unclamped; absmem with memory c; vanilla with sliding windows of c), 4 rows x the first 1,024 predictions
start=$(date +%s)
txl context "$out/xl" "$out/absmem" "$out/vanilla" --names xl absmem vanilla --lengths 16 32 64 128 256 512 \
  --batch-size 4 --max-tokens 1024 --plot docs/longmem_context.png | tee "$out/context.txt"
echo "context seconds=$(( $(date +%s) - start ))" | tee -a "$out/times.txt"
