#!/bin/bash
# The teacher's SFT set on a GPU machine (drk data sft), from the repository root:
#   OUT=/tmp/out bash experiments/teacher/sft.sh [TRAJECTORIES] [TIME_LIMIT_S] [GPUS]
# Defaults: 1200 trajectories (the first train tasks of data/rl), 3 turns, 16 trajectories (so 16 evaluations)
# in flight per GPU in a continuous pool, references timed in eager mode only (a torch.compile per new task
# would cost more than its evaluations), 500 s (no trajectory starts that would end later, judged by the mean
# so far), 1 GPU. summary.json's run.slots_busy_share says how full the pool was. The run folder is runs/teacher_sft: a rerun resumes
# there (finished trajectories are skipped), also on a fresh machine given runs/teacher_sft/trajectories.jsonl.gz
# from an earlier $OUT. Into $OUT/sft (at most 8 files come back from a device call): summary.json,
# sft.parquet, sft.jsonl.gz, trajectories.jsonl.gz, smi.txt, wall.txt, stages.json (experiments/teacher/stages.py:
# the mean seconds of each turn's evaluations, by stage). The 8k set: bash experiments/teacher/sft.sh 8000 36000
set -u
export PYTHONPATH=$PWD DRK_CACHE_DIR=${DRK_CACHE_DIR:-$PWD/.cache}
# each new task's baseline compiles the reference with torch.compile; with 16 at once, one compile thread
# each keeps them from fighting over the cores
export TORCHINDUCTOR_COMPILE_THREADS=${TORCHINDUCTOR_COMPILE_THREADS:-1}
RUN=runs/teacher_sft
mkdir -p $RUN $OUT/sft
if [ -f $RUN/trajectories.jsonl.gz ] && [ ! -f $RUN/trajectories.jsonl ]; then gunzip -k $RUN/trajectories.jsonl.gz; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/sft/smi.txt 2>&1
start=$(date +%s)
python -m drk_lab.cli data sft --tasks data/rl/prompts.jsonl.gz --split train --trajectories ${1:-1200} --turns 3 \
    --device cuda --gpus ${3:-1} --jobs 16 --time-limit ${2:-500} --eager-only --out $RUN 2> $RUN/progress.log
echo "== teacher_sft took $(( $(date +%s) - start )) s" | tee $OUT/sft/wall.txt
tr '\r' '\n' < $RUN/progress.log | grep -v "^\s*$" | tail -3
cat $RUN/trajectories*.jsonl | gzip > $RUN/trajectories.jsonl.gz
python experiments/teacher/stages.py $RUN $OUT/sft/stages.json > /dev/null  # seconds per turn and stage
cp $RUN/summary.json $RUN/sft.parquet $RUN/sft.jsonl.gz $RUN/trajectories.jsonl.gz $OUT/sft/ 2>/dev/null
ls -la $OUT/sft
