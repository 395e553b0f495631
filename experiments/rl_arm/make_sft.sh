#!/bin/bash
# The arm's SFT starting model, made once on a GPU with the mini recipe (experiments/mini: tokenizer, 2,000
# pretraining steps with drills, SFT on the 1,020 + 330 trajectories) and packed into one file (rl/packed_model.py,
# int8 rows, about 30 MB; xz takes a tenth off), returned as $OUT/mini_sft.safetensors.xz.NN (parts of 15 MiB).
# Call it back to back on one held machine until it prints "packed" (pretraining and SFT resume across calls;
# about 15 minutes in all):
#   bash experiments/rl_arm/make_sft.sh 560                  # carry .whl (TRL, datasets)
# Back here: cat <files_at>/mini_sft.safetensors.xz.* > data/models/mini_sft.safetensors.xz, and commit it (the
# unpacked file is ignored; device.sh and `xz -dk` make it where it is needed).
set -u
budget=${1:?usage: experiments/rl_arm/make_sft.sh BUDGET_SECONDS [--config NAME] [--set PART.NAME=VALUE ...]}
shift
extra=("$@")  # to experiments/mini/run.py (the tests' dry run: --config smoke); the arm's model takes none
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
if ! python3 -c "import trl, datasets" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/trl-*.whl .whl/datasets-*.whl .whl/dill-*.whl .whl/multiprocess-*.whl || exit 1
fi
run=${RUN:-runs/mini}
left() { echo $((budget - SECONDS)); }
phase() { python3 experiments/mini/run.py --out $run --export /tmp/mini_results "${extra[@]}" "$@" 2>&1 | tr '\r' '\n' | grep -v -E '[0-9]+%\|' | tail -n 3; }
stopped() { python3 -c "import json, sys; sys.exit(not json.load(open('$run/$1.json')).get('stopped_by_time_limit'))" 2>/dev/null; }
[ -f $run/init/config.json ] || phase --phase tokenizer
for name in pretrain sft; do
  [ -f $run/$name/config.json ] && ! stopped $name && continue
  [ "$(left)" -gt 120 ] || { echo "$name goes on in the next call"; exit 0; }
  phase --phase $name --set "$name.time_limit_s=$(($(left) - 60))"
  if stopped $name || [ ! -f $run/$name/config.json ]; then echo "$name goes on in the next call"; exit 0; fi
done
python3 -c "from drk_lab.rl.packed_model import pack_model; pack_model('$run/sft', '/tmp/mini_sft.safetensors')" || exit 1
xz -T0 -6 -c /tmp/mini_sft.safetensors >/tmp/mini_sft.safetensors.xz || exit 1
split -b 15M -d /tmp/mini_sft.safetensors.xz "$OUT/mini_sft.safetensors.xz."
tar czf "$OUT/mini_json.tgz" -C /tmp/mini_results . 2>/dev/null
ls -la "$OUT"; echo packed
