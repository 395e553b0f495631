#!/bin/bash
# The mini Dr. Kernel run on a GPU machine in calls of at most BUDGET seconds each; every call does the next
# phases still missing in runs/mini (the machine's disk keeps them between calls while it is held) and
# stops before a phase that would not fit. Call it again, with the same arguments, until it prints "all done":
#   bash experiments/mini/device.sh 585 [--config NAME] [--set PART.NAME=VALUE ...]   # carry .whl on the first call
#   ABLATION=none bash experiments/mini/device.sh 585 --set rl.budget_s=540   # no GRPO arm: TRLOO gets its time
#   RL_SEEDS="1 2" bash experiments/mini/device.sh 585        # then TRLOO again from the same SFT model, per seed
#   TAG=trloo_lr1e-4 bash experiments/mini/device.sh 585 --set rl.lr=1e-4   # another TRLOO arm, same SFT model
#   TAG=trloo_long ABLATION=none bash experiments/mini/device.sh 470 --set rl.budget_s=780 --set rl.snapshot_step=6
#                                    # one long TRLOO arm, evaluated at its end and after its sixth step
#   CONTINUE=1 bash experiments/mini/device.sh 585 ...   # a later call: stops at once on a fresh machine
#   EVAL_SECONDS=225 ABLATION=none bash experiments/mini/device.sh 595 --config kl, then CONTINUE=1 with the
#                                    # same and 520: the default model from nothing to its evaluation after RL
#   EVAL_TEMPERATURES="1.0" ABLATION=none bash experiments/mini/device.sh 585 ...   # SFT and the arm also at 1
#   EVAL_SECONDS=150 ... --set eval.stts_tasks=0 --set "eval.builtin_levels=()"   # held-out and seen tasks only
#   EVAL_SECONDS=330 ABLATION=none bash experiments/mini/device.sh 570 --config larger_model   # its first
#                                    # evaluation needs more than the default model's 240 s
# Order: tokenizer, pretrain, sft, eval sft, rl (TRLOO), eval rl_trloo (then at EVAL_TEMPERATURES), rl (the
# ablation: GRPO unless ABLATION says otherwise, on the same rl_budget_s of step seconds), eval rl_<ablation>,
# genbench. A phase that does not fit in what is left of a call gives that time to RL steps instead.
# Pretraining, SFT and RL stop before a step that would pass the call's end, keeping their state, and resume
# next call (so a model whose pretraining or SFT is longer than a call still fits); an RL phase is finished
# once its steps have used rl.budget_s, so the evaluation after it can follow in the same call. Later
# evaluations need what the one after SFT took (the run's own measure), with a margin. The machine goes back
# 30 s after a call ends: make the calls back to back (a call on a fresh machine starts the run over).
# experiments/mini/carry.sh carries runs/mini to a later machine, where an RL arm resumes with a larger rl.budget_s.
# Small results come back as $OUT/mini.tgz (JSON, JSONL, the log), the evaluations' trajectories as
# $OUT/trajectories.tar.xz, and the baselines measured so far as $OUT/baselines.tgz: unpacked into .cache/
# here and carried (.cache/baselines and .cache/copy_bandwidth.json beside .whl), they spare the evaluations
# measuring the eager baselines of their tasks again (about 85 s of each evaluation's 150-220 s on an H200;
# experiments/mini/run.py --phase baselines measures those of RL's first steps and the evaluations ahead). The
# run's cache is runs/cache, filled from the carried .cache on every call: a carried path replaces the
# machine's copy, which would lose what earlier calls measured.
set -u
budget=${1:?usage: experiments/mini/device.sh BUDGET_SECONDS [--config NAME] [--set PART.NAME=VALUE ...]}
shift
extra=("$@")
ablation=${ABLATION:-grpo}
tag=${TAG:-trloo}  # the TRLOO run's folder, rl_<tag>: other settings from the same SFT model get their own
filling=
cd "$(dirname "$0")/../.."
run=runs/mini
# CONTINUE=1 on every call that goes on with a run this machine should hold (a carried arm, a run's later
# calls): if the machine went back between calls, the fresh one has no run, and starting the whole
# pipeline over would spend the call on a different run; stop at once, before runs/mini is made (which
# would also stop experiments/mini/carry.sh from unpacking a carried run into it)
if [ "${CONTINUE:-}" ] && [ ! -f $run/init/config.json ]; then
  echo "mini_device: $run holds no run, so this machine is not the one that held it (CONTINUE is set):" \
       "carry the run in again with experiments/mini/carry.sh, or call without CONTINUE to start a new run" >&2
  exit 2
fi
results=/tmp/mini_results
mkdir -p "$results" "$run" runs/cache/baselines
[ -d .cache/baselines ] && cp -n .cache/baselines/*.json runs/cache/baselines/ 2>/dev/null
[ -f .cache/copy_bandwidth.json ] && cp -n .cache/copy_bandwidth.json runs/cache/ 2>/dev/null  # -n: keep what this machine measured
export PYTHONPATH=/tmp/site:$PWD DRK_CACHE_DIR=$PWD/runs/cache
if ! python3 -c "import trl, datasets" 2>/dev/null; then  # TRL and datasets with what the GPU image lacks of their needs
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/trl-*.whl .whl/datasets-*.whl .whl/dill-*.whl .whl/multiprocess-*.whl || exit 1
fi
left() { echo $((budget - SECONDS)); }
phase() {  # phase SECONDS_IT_NEEDS ARGS...: run it if it fits in what is left of the budget
  local need=$1
  shift
  if [ "$(left)" -lt "$need" ]; then
    echo "stopped: $(left) s left, '$*' needs about $need s"
    [ "$filling" ] || { filling=1; fill "${extra[@]}"; }
    pack
    exit 0
  fi
  echo "== $* ($(left) s left)"
  timeout $(($(left) - 10)) python experiments/mini/run.py --out $run --export $results "$@" >>"$results/log.txt" 2>&1
  local rc=$?
  tr '\r' '\n' <"$results/log.txt" | grep -v -E '[0-9]+%\|' | tail -n 4
  pack
  [ $rc -eq 0 ] || { echo "failed (exit $rc); the log is in mini.tgz"; exit $rc; }
}
pack() {  # the evaluations' trajectories apart: with eval.samples=2 they pass the 16 MiB a returned file may have
  tar czf "$OUT/mini.tgz" -C "$results" --exclude='./eval_*.jsonl' . 2>/dev/null
  (cd "$results" && ls eval_*.jsonl >/dev/null 2>&1 && tar cf - eval_*.jsonl | xz -T0 -3 >"$OUT/trajectories.tar.xz")
  tar czf "$OUT/baselines.tgz" -C runs/cache baselines $([ -f runs/cache/copy_bandwidth.json ] && echo copy_bandwidth.json)
}

evaluation_seconds() {  # evaluation_seconds AT_LEAST: what the run's evaluation after SFT took, with a margin
  python3 -c "import json; print(max($1, int(json.load(open('$run/eval_sft.json'))['seconds']) + 20))" 2>/dev/null || echo "$1"
}
stopped() {  # stopped NAME: NAME.json says its phase stopped at a call's limit (the next call resumes it)
  python3 -c "import json, sys; sys.exit(not json.load(open('$run/$1.json')).get('stopped_by_time_limit'))" 2>/dev/null
}
rl_done() { [ -f $run/rl_$1.json ] && ! stopped rl_$1; }
limited() {  # limited PHASE SECONDS ARGS...: pretraining or SFT up to the call's end; the next call resumes it
  local name=$1 need=$2
  shift 2
  phase "$need" --phase "$name" --set "${name}.time_limit_s=$(($(left) - 30))" "$@"
  if stopped "$name"; then echo "$name goes on in the next call (CONTINUE=1)"; exit 0; fi
}
rl() {  # rl ADVANTAGE TAG [ARGS...]: RL steps until the run is done or the call's time is nearly up (it resumes)
  local advantage=$1 name=$2
  shift 2
  phase 170 --phase rl --advantage "$advantage" --tag "$name" --set rl.time_limit_s=$(($(left) - 40)) "$@"
}
fill() {  # a phase that does not fit: spend what is left on RL steps instead of leaving it idle
  [ -f $run/sft/config.json ] || return 0
  for advantage in trloo $ablation; do
    [ "$advantage" = none ] && return 0
    local name=$advantage
    [ "$advantage" = trloo ] && name=$tag
    rl_done $name && continue
    [ "$(left)" -ge 170 ] && rl $advantage $name "$@"
    return 0
  done
}

if [ ! -f $run/sft/config.json ]; then  # a carried run (experiments/mini/carry.sh) has the SFT model and no pretrained one
  [ -f $run/init/config.json ] || phase 60 --phase tokenizer "$@"
  [ -f $run/pretrain/config.json ] || limited pretrain 90 "$@"
  limited sft 90 "$@"
fi
[ -f $run/eval_sft.json ] || phase "${EVAL_SECONDS:-240}" --phase eval --checkpoint sft "$@"
rl_done $tag || rl trloo $tag "$@"
[ -f $run/eval_rl_$tag.json ] || phase "$(evaluation_seconds 200)" --phase eval --checkpoint rl_$tag "$@"
for snapshot in $run/rl_${tag}_step*/model; do  # --set rl.snapshot_step=N: the same arm after step N
  [ -d "$snapshot" ] || continue
  name=$(basename "$(dirname "$snapshot")")
  [ -f $run/eval_$name.json ] || phase 110 --phase eval --checkpoint $name --set eval.stts_tasks=0 \
    --set "eval.builtin_levels=()" "$@"
done
# the SFT model and the arm sampled at other temperatures too (EVAL_TEMPERATURES="1.0"), held-out and seen
# tasks, each paired with the SFT model at its temperature: eval_sft_temp1.json, eval_rl_<tag>_temp1.json
for temperature in ${EVAL_TEMPERATURES:-}; do
  for checkpoint in sft rl_$tag; do
    label=$(python3 -c "print('${checkpoint}_temp%g' % float('$temperature'))")
    [ -f $run/eval_$label.json ] || phase 130 --phase eval --checkpoint $checkpoint --set eval.stts_tasks=0 \
      --set "eval.builtin_levels=()" "$@" --set eval.temperature=$temperature
  done
done
if [ "$ablation" != none ]; then
  rl_done $ablation || rl $ablation $ablation "$@"
  # the ablation is compared on the held-out split only (no STTS, no built-in suite)
  [ -f $run/eval_rl_$ablation.json ] || phase 110 --phase eval --checkpoint rl_$ablation --set eval.stts_tasks=0 \
    --set "eval.builtin_levels=()" "$@"
fi
# further RL seeds (rl_trloo_seed<N>), evaluated as the ablation is
for seed in ${RL_SEEDS:-}; do
  rl_done trloo_seed$seed || rl trloo trloo_seed$seed --set rl.seed=$seed "$@"
  [ -f $run/eval_rl_trloo_seed$seed.json ] || phase 110 --phase eval --checkpoint rl_trloo_seed$seed \
    --set eval.stts_tasks=0 --set "eval.builtin_levels=()" "$@"
done
# the sampler's speed was measured on earlier runs of the same model size: last, if time is left
[ -f $run/genbench.json ] || phase 80 --phase genbench "$@"
echo "all done"
pack
