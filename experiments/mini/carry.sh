#!/bin/bash
# Carry a mini run (experiments/mini/device.sh's runs/mini) from one GPU machine to a later one, so that one RL
# arm can run longer than one machine's lease. The device tool passes at most 64 MiB a call each way and
# the run's state is about 430 MB (the SFT model, and the arm's last checkpoint with its optimizer state),
# so it travels as numbered parts over several short calls:
#   on the machine that holds the run, after device.sh's "all done" (TAG as there):
#     TAG=trloo_long bash experiments/mini/carry.sh out 0   # packs the run; parts 0-4 into $OUT; says how many
#     TAG=trloo_long bash experiments/mini/carry.sh out 1   # parts 5-9, and so on until "all parts are out"
#   here, after each of those calls:  bash experiments/mini/carry.sh keep FILES_AT   # into .carry/parts
#   later, on a fresh machine, each call carrying .carry/next (filled here first):
#     bash experiments/mini/carry.sh next                    # here: the next 3 parts not yet sent (36 MiB)
#     bash experiments/mini/carry.sh in                      # there: adds them; with the last one, unpacks runs/mini
#   then device.sh with a larger --set rl.budget_s resumes the arm from its last step (or, with a new TAG,
#   starts another arm from the same SFT model); the last part can go in the same command as its first call:
#     bash experiments/mini/carry.sh in && CONTINUE=1 TAG=... bash experiments/mini/device.sh 570 ...   # carry .carry/next too
#   a new arm needs only the SFT model: first, here, cut the parts down to it and its evaluations (about 10
#   parts instead of 37; the whole state moves to .carry/whole):
#     bash experiments/mini/carry.sh sft
# The arm's end evaluation goes along renamed as its earlier point, eval_rl_<tag>_step<N> (and rl_<tag>.json as
# rl_<tag>_step<N>.json), so that device.sh trains on and evaluates the new end, paired with that point.
# Left behind: the random and pretrained models and the exported ones (no later phase reads them).
set -euo pipefail
cd "$(dirname "$0")/../.."
run=runs/mini
part_size=${PART_SIZE:-12M}  # split's size: 5 parts of 12 MiB a call back, 3 beside the repository in, under 64 MiB
usage() { echo "usage: experiments/mini/carry.sh out K | keep FOLDER | next | in | sft" >&2; exit 2; }

pack() {  # runs/carry_out/part-NNN and manifest: the run's state, the arm's end renamed as its earlier point
  local tag=${TAG:?TAG: the arm to carry, as given to device.sh}
  [ -f $run/rl_$tag.json ] || { echo "mini_carry: $run/rl_$tag.json: no RL arm '$tag' here" >&2; exit 2; }
  local step ckpt d
  step=$(python3 -c "import json; print(json.load(open('$run/rl_$tag.json'))['steps_done'])")
  ckpt=$(ls -d $run/rl_$tag/ckpt/step_* | tail -n 1)
  local skip=(--exclude=./init/model.safetensors --exclude=./pretrain --exclude='*/model')
  for d in $run/rl_*/ckpt/step_*; do [ "$d" = "$ckpt" ] || skip+=(--exclude="./${d#$run/}"); done
  local as_earlier="s,^\./\(eval_\)\?rl_${tag}\(\|_heldout\|_seen\|_builtin\|_heldout_stts\)\.json,./\1rl_${tag}_step$step\2.json,"
  rm -rf runs/carry_out && mkdir -p runs/carry_out
  tar cf - -C $run "${skip[@]}" --transform="$as_earlier" . | split_into runs/carry_out "$tag" "$step"
  echo "packed rl_$tag at step $step ($(basename "$ckpt")) into $(ls runs/carry_out | grep -c part-) parts of $part_size"
}

split_into() {  # split_into FOLDER TAG STEP: the tar stream on stdin, compressed, as FOLDER's parts and manifest
  gzip -1 | split -a 3 -d -b "$part_size" - "$1/part-"
  (echo "parts=$(ls "$1" | grep -c part-)"; echo "tag=$2"; echo "step=$3"
   echo "sha256=$(cat "$1"/part-* | sha256sum | cut -d' ' -f1)") >"$1/manifest"
}

case ${1:-} in
  out)  # out K: parts 5K..5K+4 (and the manifest) into $OUT
    k=${2:?usage: experiments/mini/carry.sh out K}
    [[ $k =~ ^[0-9]+$ ]] || usage
    [ "$k" = 0 ] || [ -f runs/carry_out/manifest ] || { echo "mini_carry: nothing packed; call 'out 0' first" >&2; exit 2; }
    [ "$k" != 0 ] || pack
    cp runs/carry_out/manifest "$OUT/"
    ls runs/carry_out/part-* | sed -n "$((5 * k + 1)),$((5 * k + 5))p" | xargs -r cp -t "$OUT/"
    parts=$(grep -oP '^parts=\K.*' runs/carry_out/manifest)
    if [ $((5 * k + 5)) -ge "$parts" ]; then echo "all parts are out ($parts)"
    else echo "parts $((5 * k))-$((5 * k + 4)) of $parts are out; next: out $((k + 1))"; fi
    ;;
  keep)  # keep FOLDER: the parts a call brought back, into .carry/parts
    from=${2:?usage: experiments/mini/carry.sh keep FOLDER}
    [ -f "$from/manifest" ] || { echo "mini_carry: $from has no manifest (not an 'out' call's files)" >&2; exit 2; }
    mkdir -p .carry/parts
    if [ -f .carry/parts/manifest ] && ! cmp -s "$from/manifest" .carry/parts/manifest; then
      echo "mini_carry: $from is another run's parts than .carry/parts holds; remove .carry first" >&2; exit 2
    fi
    cp "$from"/manifest "$from"/part-* .carry/parts/ && chmod u+w .carry/parts/*
    echo "$(ls .carry/parts/part-* | wc -l) of $(grep -oP '^parts=\K.*' .carry/parts/manifest) parts kept"
    ;;
  next)  # next: into .carry/next, 3 parts not yet sent (.carry/sent lists those sent; a failed call: carry again)
    [ -f .carry/parts/manifest ] || { echo "mini_carry: .carry/parts holds no run (experiments/mini/carry.sh keep)" >&2; exit 2; }
    rm -rf .carry/next && mkdir -p .carry/next && touch .carry/sent
    cp .carry/parts/manifest .carry/next/
    for f in $(cd .carry/parts && ls part-* | grep -vxF -f ../sent | head -n 3); do
      cp .carry/parts/$f .carry/next/ && echo $f >>.carry/sent
    done
    staged=$(ls .carry/next | grep -c part- || true)
    [ "$staged" -gt 0 ] || { echo "mini_carry: every part was sent already (remove .carry/sent to send them again)" >&2; exit 2; }
    echo "$staged parts to carry in .carry/next; $(wc -l <.carry/sent) of" \
         "$(grep -oP '^parts=\K.*' .carry/parts/manifest) sent with this call"
    ;;
  in)  # in: the parts carried in .carry/next into runs/carried; when all are there, unpack into runs/mini
    [ -f .carry/next/manifest ] || { echo "mini_carry: no .carry/next/manifest here: carry .carry/next" >&2; exit 2; }
    mkdir -p runs/carried
    [ ! -f runs/carried/manifest ] || cmp -s .carry/next/manifest runs/carried/manifest || rm -f runs/carried/*
    cp .carry/next/* runs/carried/
    parts=$(grep -oP '^parts=\K.*' runs/carried/manifest)
    have=$(ls runs/carried | grep -c part-)
    if [ "$have" -lt "$parts" ]; then echo "$have of $parts parts here"; exit 0; fi
    [ "$(cat runs/carried/part-* | sha256sum | cut -d' ' -f1)" = "$(grep -oP '^sha256=\K.*' runs/carried/manifest)" ] \
      || { rm -rf runs/carried; echo "mini_carry: the parts' checksum differs from the manifest's;" \
             "send them all again (remove .carry/sent here)" >&2; exit 1; }
    [ ! -e $run ] || { echo "mini_carry: $run exists already; a carried run goes to a fresh machine" >&2; exit 2; }
    mkdir -p $run && cat runs/carried/part-* | gunzip | tar xf - -C $run && rm -rf runs/carried
    tag=$(grep -oP '^tag=\K.*' .carry/next/manifest)
    if [ "$tag" = sft ]; then echo "unpacked: $run holds the SFT model and its evaluations (no RL arm)"
    else echo "unpacked: $run holds rl_$tag at step $(grep -oP '^step=\K.*' .carry/next/manifest)"; fi
    ;;
  sft)  # sft: here, .carry/parts cut down to what a new arm needs (no arm's checkpoint, probes or evaluations)
    [ -f .carry/parts/manifest ] || { echo "mini_carry: .carry/parts holds no run (experiments/mini/carry.sh keep)" >&2; exit 2; }
    [ ! -e .carry/whole ] || { echo "mini_carry: .carry/whole exists: the parts were cut down already" >&2; exit 2; }
    unpacked=$(mktemp -d)
    cat .carry/parts/part-* | gunzip | tar xf - -C "$unpacked"
    mv .carry/parts .carry/whole && mkdir .carry/parts && rm -rf .carry/sent .carry/next
    tar cf - -C "$unpacked" --exclude='./rl_*' --exclude='./eval_rl_*' . | split_into .carry/parts sft 0
    rm -rf "$unpacked"
    echo "$(ls .carry/parts | grep -c part-) parts hold the SFT model and its evaluations;" \
         "the whole state ($(ls .carry/whole | grep -c part-) parts) is in .carry/whole"
    ;;
  *) usage ;;
esac
