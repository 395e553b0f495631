#!/bin/bash
# The teacher's SFT set on a GPU machine, results under $OUT/sft (trajectories, sft.jsonl.gz, sft.parquet, summary.json):
#   OUT=/tmp/out bash bench/teacher_sft.sh [TRAJECTORIES] [TIME_LIMIT_S] [GPUS]
# Defaults: 1200 trajectories of the train split of data/rl, 3 turns, 16 evaluations in flight per GPU,
# a 540 s limit (no new batch starts that would end later), 1 GPU. Rerunning into the same $OUT/sft
# resumes: finished trajectories are skipped. The 8k set: bash bench/teacher_sft.sh 8000 36000 (see data/README.md).
export PYTHONPATH=$PWD DRK_CACHE_DIR=${DRK_CACHE_DIR:-$PWD/.cache}
mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/smi.txt 2>&1
start=$(date +%s)
python -m drk_lab.cli data sft --tasks data/rl/prompts.jsonl.gz --split train --trajectories ${1:-1200} --turns 3 \
    --device cuda --gpus ${3:-1} --jobs 16 --time-limit ${2:-540} --out $OUT/sft 2> >(tr '\r' '\n' | tail -5 >&2)
echo "== teacher_sft took $(( $(date +%s) - start )) s" | tee $OUT/sft/wall.txt
