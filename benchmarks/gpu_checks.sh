#!/usr/bin/env bash
# Everything that needs a CUDA device, in one go: the CUDA tests, the fused kernel's benchmark, a training step by
# precision and attention, and the paper's Table 9 (evaluation speed) on this GPU. Logs go to $OUT (default
# /tmp/txl-gpu). Run from the repository root, with the package installed or importable (PYTHONPATH=src).
#   bash benchmarks/gpu_checks.sh
set -o pipefail
OUT=${OUT:-/tmp/txl-gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The interpreter that holds torch: `python` where there is one, else `python3` (a CUDA image may have only that).
python() { if command -v -p python >/dev/null 2>&1 && command python -c "import torch" 2>/dev/null; then
           command python "$@"; else python3 "$@"; fi; }
step() { echo; echo "=== $1 ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"

step "CUDA tests"
XDIST=$(python -c "import xdist" 2>/dev/null && echo "-n 8")  # pytest-xdist, where installed: Triton compiles in parallel
timeout 400 python -m pytest -q -rs $XDIST -p no:cacheprovider tests/test_cuda.py tests/fast_paths/test_triton_attention.py \
    "tests/model/test_backbone.py::test_packed_episodes_equal_each_episode_alone" 2>&1 | tee "$OUT/pytest_cuda.log" | tail -40

step "fused attention against the plain path (bf16, then fp32)"
timeout 90 python benchmarks/gpu_attention.py --dtype bfloat16 2>&1 | tee "$OUT/gpu_attention.md"
timeout 60 python benchmarks/gpu_attention.py --dtype float32 --mem-lens 128 512 2048 8192 2>&1 | tee -a "$OUT/gpu_attention.md"

step "training step: enwik8 base shape"
timeout 120 python benchmarks/gpu_train.py 2>&1 | tee "$OUT/gpu_train.md"
timeout 60 python benchmarks/gpu_train.py --variants bf16:plain bf16:triton --mem-len 2048 --steps 5 2>&1 \
    | tee -a "$OUT/gpu_train.md"

step "the paper's Table 9 on this GPU"
timeout 120 python -m transformer_xl bench eval-speed --attn-lens 800 1800 2800 3800 --device cuda \
    --plot "$OUT/eval_speed_gpu.png" 2>&1 | tee "$OUT/eval_speed_gpu.md"
step "done"
