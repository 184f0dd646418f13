#!/usr/bin/env bash
# The GPU check of issue 19 in one call of the device tool (docs/benchmarks.md, "On a GPU"):
# the baby GPT recipe (val loss, training time, compile time) and the GPT-2 small training step
# (bf16, torch.compile, MFU), within 8 minutes on one H200.
#
#   bash benchmarks/gpu.sh prepare                # here (package index reachable): .whl/ and .gpu-data/
#   bash benchmarks/gpu.sh                        # there, in the repo root (carry .whl and .gpu-data)
#   GPU_SH_DEVICE=cpu bash benchmarks/gpu.sh      # the same steps, tiny, on the CPU (the plumbing)
#
# The GPU machine has no internet and its own Python 3.12 (torch, lightning, transformers, timm,
# ...): what the zoo and the peers need beyond that travels as wheels. Everything printed also
# goes to $OUT/gpu.log when $OUT is set (the device tool brings $OUT back).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the GPU machine lacks (KINDS.md's package list against pyproject.toml and the peers'
# needs), at the versions of benchmarks/requirements.lock. antlr4 4.9.3 (omegaconf's) is a
# source release only: pure Python, so it is built into a wheel here.
WHEELS="hydra-core omegaconf torchdata soundfile cffi pycparser litgpt x-transformers einx frozendict loguru torch-einops-utils"
SOURCE_ONLY="antlr4-python3-runtime"
PLATFORMS="manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64"
DATA="${ZOO_DATA_DIR:-/work/staged-data}/tinyshakespeare/input.txt"
RECIPE_MINUTES="${GPU_SH_RECIPE_MINUTES:-3}"  # trainer.max_time of the recipe (compile and validation included)
BUDGET_S="${GPU_SH_BUDGET_S:-470}"            # the whole script, install included (the goal: 8 minutes)

pin() {  # name==version of $1 in benchmarks/requirements.lock
    grep -i -m1 "^$1==" benchmarks/requirements.lock | cut -d' ' -f1 | grep . ||
        { echo "benchmarks/requirements.lock pins no $1" >&2; return 1; }
}

prepare() {
    local py="${PYTHON:-python3}" pins="" platforms=""
    for name in $WHEELS; do pins="$pins $(pin "$name")"; done
    for p in $PLATFORMS; do platforms="$platforms --platform $p"; done
    rm -rf .whl && mkdir -p .whl
    # shellcheck disable=SC2086  # word splitting of the lists is meant
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        $platforms -d .whl $pins
    for name in $SOURCE_ONLY; do "$py" -m pip wheel -q --no-deps -w .whl "$(pin "$name")"; done
    [ -f "$DATA" ] || { echo "$DATA is missing: set ZOO_DATA_DIR to the folder that holds tinyshakespeare/" >&2; exit 1; }
    mkdir -p .gpu-data/tinyshakespeare
    cp -L "$DATA" .gpu-data/tinyshakespeare/input.txt
    ls .whl
    du -sh .whl .gpu-data
    echo "device tool: run with carry [\".whl\", \".gpu-data\"], timeout_s 600, command:"
    echo "    PYTHONUNBUFFERED=1 bash benchmarks/gpu.sh"
}

if [ "${1:-}" = prepare ]; then prepare; exit; fi
[ $# -eq 0 ] || { echo "usage: bash benchmarks/gpu.sh [prepare]   (GPU_SH_DEVICE=cpu: the CPU smoke)" >&2; exit 2; }
[ -f .gpu-data/tinyshakespeare/input.txt ] || { echo ".gpu-data/tinyshakespeare/input.txt is missing: run 'bash benchmarks/gpu.sh prepare' first (and carry .gpu-data)" >&2; exit 1; }

if [ -n "${OUT:-}" ]; then exec > >(tee -a "$OUT/gpu.log") 2>&1; fi
start=$(date +%s)
left() { local s=$((BUDGET_S - ($(date +%s) - start))); echo $((s > 1 ? s : 1)); }  # timeout 0 would not stop
PY="${PYTHON:-python3}"
RUN="${GPU_SH_RUN_DIR:-/tmp/gpu-sh}"
rm -rf "$RUN" && mkdir -p "$RUN"
export ZOO_DATA_DIR="$PWD/.gpu-data" ZOO_CACHE_DIR="$RUN/cache" PYTHONUNBUFFERED=1

if [ "${GPU_SH_DEVICE:-cuda}" = cpu ]; then  # the smoke: a few steps of small shapes, no compile
    RECIPE=(trainer.accelerator=cpu trainer.precision=32 model.compile=false model.net.n_layers=1
            model.net.context=32 model.net.block.d_model=32 model.net.block.n_heads=2 data.batch_size=4
            data.val_batches=2 trainer.max_steps=30 trainer.val_check_interval=10 trainer.log_every_n_steps=5
            model.sample_tokens=20)
    BENCH=(--device cpu --dtype fp32 --layers 1 --width 32 --heads 2 --context 16 --vocab 65 --batch 2
           --steps 2 --warmup 1)
else
    [ -d .whl ] || { echo ".whl is missing: run 'bash benchmarks/gpu.sh prepare' first (and carry .whl)" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    nvidia-smi -L || true
    RECIPE=()
    BENCH=(--device cuda --dtype bf16 --layers 12 --width 768 --heads 12 --context 1024 --vocab 50304 --batch 16
           --compile --steps 10 --warmup 2)
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # benchmarks/*.py import the zoo from here
"$PY" -c 'import platform, torch; gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
print(f"python {platform.python_version()}, torch {torch.__version__}, {gpu}")'

echo "== 1. baby GPT (experiment=gpt_shakespeare_char), training capped at $RECIPE_MINUTES minutes"
recipe=(train.py experiment=gpt_shakespeare_char "hydra.run.dir=$RUN/recipe" test=false
        "+trainer.max_time='00:00:$(printf %02d "$RECIPE_MINUTES"):00'" callbacks.progress_bar.refresh_rate=0 "${RECIPE[@]}")
echo "$PY ${recipe[*]}"
t0=$(date +%s)
cap=$((RECIPE_MINUTES * 60 + 90))  # the fit's max_time, and start-up, the last validation and the sample
timeout "$(( $(left) < cap ? $(left) : cap ))" "$PY" "${recipe[@]}" || echo "the recipe stopped with status $? (timed out: 124)"
echo "recipe wall time $(($(date +%s) - t0)) s (start-up, compile, validation and the sample included)"
"$PY" benchmarks/gpu_recipe.py "$RUN/recipe/metrics.csv" || true

echo "== 2. GPT-2 small training step ($(left) s left)"
echo "$PY benchmarks/gpt.py ${BENCH[*]}"
timeout "$(left)" "$PY" benchmarks/gpt.py "${BENCH[@]}" || echo "the benchmark stopped with status $? (timed out: 124)"
echo "== done in $(($(date +%s) - start)) s"
