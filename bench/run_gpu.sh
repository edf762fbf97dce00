#!/usr/bin/env bash
# The GPU benchmarks (encode at batch 256 in bf16 with its forward-only ceiling; the training step at batch 64, 256
# and 512 against the released code's step; the similarity matrix), for a GPU machine without network, such as the
# one the `device` tool lends. Here, once: bash ../shared/tools/offline-gpu-bundle.sh (packs .offline-gpu/); there:
#   source .offline-gpu/env.sh && bash bench/run_gpu.sh
# Then, back here: python -m bench.report adds the *_cuda*.json rows to results/BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python}
$python -m bench.bench_similarity --device cuda --repeats 3 --json results/bench_similarity_cuda.json
for batch in 64 256 512; do
  $python -m bench.bench_train_step --device cuda --bf16 --batch_size "$batch" \
    --json "results/bench_train_step_cuda_batch$batch.json"
done
$python -m bench.bench_encode --device cuda --bf16 --batch_size 256 --sentences 12961 --json results/bench_encode_cuda.json
