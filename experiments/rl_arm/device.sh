#!/bin/bash
# One GPU call of the arm (issue 62): resume from the run folder's committed state, evaluate when an evaluation is
# due (step 0, then every arm.eval_every steps; resumable in chunks), else take RL steps until BUDGET seconds are
# nearly spent; then pack the run folder's state/, log/ and eval/ into $OUT/run.tgz.NN (parts of 15 MiB at most).
#   bash experiments/rl_arm/device.sh 540                          # the TRLOO arm; carry .whl (TRL, datasets)
#   bash experiments/rl_arm/device.sh 540 --config control_sft     # the continued-SFT control
# Back here: cat <files_at>/run.tgz.* | tar xzf - -C <the run folder>, and commit it (the next call resumes).
# Needs data/models/mini_sft.safetensors.xz (experiments/rl_arm/make_sft.sh makes it; unpacked here) and data/rl_arm/.
set -u
budget=${1:?usage: experiments/rl_arm/device.sh BUDGET_SECONDS [--config NAME] [--set PART.NAME=VALUE ...]}
shift
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
if ! python3 -c "import trl, datasets" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/trl-*.whl .whl/datasets-*.whl .whl/dill-*.whl .whl/multiprocess-*.whl || exit 1
fi
model=data/models/mini_sft.safetensors
[ -f $model ] || [ ! -f $model.xz ] || xz -dk $model.xz || exit 1
run=$(python3 -c "import sys; from experiments.rl_arm.run import parse_settings; from experiments.rl_arm.settings import resolve
args = sys.argv[1:]; configs = [args[i + 1] for i, a in enumerate(args) if a == '--config']
sets = [args[i + 1] for i, a in enumerate(args) if a == '--set']; s = parse_settings(configs, sets)
print(resolve(s.arm.run)); assert resolve(s.model.packed).is_file(), f'no SFT model at {s.model.packed}'" "$@") || exit 2
mkdir -p "$run"
left() { echo $((budget - SECONDS)); }
while [ "$(left)" -gt 90 ]; do
  if python3 experiments/rl_arm/evaluate.py --due "$@"; then
    echo "== evaluation ($(left) s left)"
    python3 experiments/rl_arm/evaluate.py --time-limit $(($(left) - 45)) "$@" 2>>"$run/stderr.txt" | tail -c 2000 || break
    python3 experiments/rl_arm/evaluate.py --due "$@" && { echo "evaluation goes on in the next call"; break; }
  else
    echo "== steps ($(left) s left)"
    python3 experiments/rl_arm/run.py --time-limit $(($(left) - 45)) "$@" 2>>"$run/stderr.txt" || break
    python3 experiments/rl_arm/evaluate.py --due "$@" || break  # stopped by time, not at an evaluation's step
  fi
done
tail -n 40 "$run/stderr.txt" 2>/dev/null | tr '\r' '\n' | grep -v -E '[0-9]+%\||^\s*$|warn' | tail -n 8
tail -c 100000 "$run/stderr.txt" >"$run/stderr.tail" 2>/dev/null; rm -f "$run/stderr.txt"
tar czf - -C "$run" $(cd "$run" && ls -d state log eval stderr.tail 2>/dev/null) | split -b 15M -d - "$OUT/run.tgz."
ls -la "$OUT"
