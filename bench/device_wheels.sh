#!/bin/bash
# Fill .whl/ (.gitignore keeps it out of git) with the wheels that `drk serve` and the Ray pool need on the GPU machine,
# which has Python 3.12 and no network; run it here, where pip reaches a package index:
#   bench/device_wheels.sh            # prints what it saved and the total (about 28 MiB)
# On the GPU machine, carry .whl and begin the command with (then e.g. bench/gpu_run.sh service:900):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
# Ray's own wheel is 76 MiB, over what a call may carry: bench/slim_ray.py rebuilds it without what a
# local cluster of actors never loads (about 23 MiB). The GPU image already has Ray's other needs (click,
# filelock, msgpack, packaging, protobuf, pyyaml, requests, attrs) and uvicorn's (click, h11), httpx and anyio.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
RAY=ray==2.60.0
WHEELS=(  # what the GPU image lacks, at versions tested together
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 opentelemetry-api==1.45.2
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 annotated-doc==0.0.7
  typing-extensions==4.16.0  # pydantic needs >=4.16, newer than the image may hold
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1  # Ray's
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19  # the RL trainer (bench/rl_run.py, rl_multi_gpu.py)
)
download() {
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$@"
}
mkdir -p .whl
rm -f .whl/*.whl  # one version of each: two stop the whole install there
download -d .whl "${WHEELS[@]}"
full=$(mktemp -d)
trap 'rm -rf "$full"' EXIT
download -d "$full" "$RAY"
"$PYTHON" bench/slim_ray.py "$full"/ray-*.whl --out .whl
ls -l .whl
echo "total: $(du -cb .whl/*.whl | tail -1 | awk '{printf "%.1f MiB", $1 / 1048576}') in .whl (a device call carries at most 64 MiB with the working tree)"
