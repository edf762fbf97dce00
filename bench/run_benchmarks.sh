#!/usr/bin/env bash
# Rerun the benchmarks on this machine's device (cpu, or cuda when there is a GPU) and regenerate
# results/BENCHMARKS.md. Each prints its ratios; the JSON files keep them for the report.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The fast tokenizer's threads stay on: nothing here forks after tokenising (no DataLoader workers, no num_proc), and
# encode() tokenises all sentences in one call, which the threads speed up.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
device=$(.venv/bin/python -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')")
.venv/bin/python -m bench.bench_similarity --device "$device" --repeats 3 --json "results/bench_similarity_$device.json"
.venv/bin/python -m bench.bench_train_step --device "$device" --json "results/bench_train_step_$device.json"
# the default model (one trunk) and the earlier two-path design against sentence-transformers on the same backbone
.venv/bin/python -m bench.bench_encode --device "$device" --sentences 2000 --batch_size 32 \
  --json "results/bench_encode_$device.json"
.venv/bin/python -m bench.bench_encode --device "$device" --sentences 2000 --batch_size 32 --variance_layers 0 \
  --json "results/bench_encode_${device}_two_paths.json"
if [ "$device" = cpu ]; then
  .venv/bin/python -m bench.bench_cpu_bf16 --json results/bench_cpu_bf16.json
fi
.venv/bin/python -m bench.bench_data_scale --json "results/bench_data_scale_$device.json"
# Entailment search at 100k and 1M Gaussians (CPU, FAISS; ~20 min on 2 cores, 18 GB peak); recall on real sentences
# too when the quickstart model is there.
real=$([ -d outputs/quickstart ] && echo "--real_model outputs/quickstart" || true)
.venv/bin/python -m bench.bench_search --json "results/bench_search_cpu.json" $real
.venv/bin/python -m bench.bench_index_load --json "results/bench_index_load_cpu.json"
# a query process over a database index of 100k and 1M Gaussians (PostgreSQL + pgvector, Milvus Lite; d = 64)
.venv/bin/python -m bench.bench_client_memory --json "results/bench_client_memory_cpu.json"
# the driver of a Ray build into pgvector at 10k and 100k sentences (the quickstart model, when it is there)
[ -d outputs/quickstart ] && .venv/bin/python -m bench.bench_ray_build --model outputs/quickstart \
  --json "results/bench_ray_build_cpu.json"
# PyTorch vs ONNX Runtime on a trained folder (the release model, else the quickstart's): speed, top-10, int8 cost
serving_model=$([ -d outputs/release ] && echo outputs/release || echo outputs/quickstart)
[ -d "$serving_model" ] && .venv/bin/python -m bench.bench_serving --model "$serving_model" --quality \
  --json "results/bench_serving_$device.json"
.venv/bin/python -m bench.report
