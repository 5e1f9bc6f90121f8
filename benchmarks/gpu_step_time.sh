#!/usr/bin/env bash
# The step-time and step-bytes measurements for a lent GPU, in one run (~5 min on an H200).
#   bash benchmarks/gpu_step_time.sh OUTDIR SUFFIX     # e.g. bash benchmarks/gpu_step_time.sh out _h200
# Writes, under OUTDIR: step_bytes{SUFFIX}.*, update_time{SUFFIX}.*, step_time_scale{SUFFIX}.*,
# step_time_adamw{SUFFIX}.* and log.txt. Runs from the repository root without installing
# (PYTHONPATH), with the machine's own jax, optax and flax.
set -u
out=${1:?OUTDIR} suffix=${2:?SUFFIX}
mkdir -p "$out"
export PYTHONPATH="$PWD:$PWD/benchmarks" PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import jax, optax, flax; print(jax.__version__, optax.__version__, flax.__version__, jax.devices())"
  timeout 120 python3 benchmarks/step_time_scale.py --bytes --out "$out" --suffix "$suffix"
  timeout 150 python3 benchmarks/step_time_scale.py --update --sizes 1M,10M,100M --repeats 7 --steps 20 \
      --out "$out" --suffix "$suffix"
  timeout 120 python3 benchmarks/step_time_scale.py --sizes 1M,10M,100M --repeats 5 --steps 20 \
      --out "$out" --suffix "$suffix"
  mkdir -p "$out/adamw"
  timeout 80 python3 benchmarks/step_time.py --only "metaoptax.adamw(" --repeats 9 --steps 50 \
      --out "$out/adamw" && mv "$out/adamw/step_time.md" "$out/step_time_adamw$suffix.md" \
      && mv "$out/adamw/step_time.png" "$out/step_time_adamw$suffix.png"
} 2>&1 | tee "$out/log.txt"
