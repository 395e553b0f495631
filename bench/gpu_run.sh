#!/bin/bash
# One device call on the H200: GPU tests and benchmark phases, logs and the baseline cache under $OUT.
#   bench/gpu_run.sh tests latency:100 throughput:150 fresh:120 stability:200 hacks:recall hacks:false_positives overhead
# A step NAME:SECONDS runs bench/eval_speed.py NAME with that time limit. Carry .cache/baselines and
# .cache/copy_bandwidth.json (from a previous $OUT/baselines.tgz) to skip recomputing the baselines.
export PYTHONPATH=$PWD DRK_CACHE_DIR=$PWD/.cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/smi.txt
for step in "$@"; do
  start=$(date +%s)
  case $step in
    tests) timeout ${T:-300} python -m pytest -q -m gpu tests/test_gpu.py -p no:cacheprovider -rA > $OUT/gpu_tests.txt 2>&1 ;;
    unlocked:*) DRK_LIFECYCLE_LOCK=0 timeout 120 python bench/eval_speed.py ${step#*:} ;;  # A/B of the lifecycle lock
    warm16) DRK_WARM_WORKERS=16 timeout 90 python bench/eval_speed.py throughput_fork ;;
    fresh:*) DRK_WORKER_USES=1 timeout ${step#*:} python bench/eval_speed.py throughput_fork ;;  # no worker reuse
    profcost) timeout 200 python bench/profiler_cost.py ;;
    rl:*) PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/rl_run.py --random-hidden 1024 --random-layers 8 \
            --force-solutions --steps 3 --log-dir /tmp/rl_log ;;  # needs trl and datasets: see BENCHMARKS.md
    ncu) timeout 240 python bench/ncu_check.py ;;
    service:*) PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/service_gpu.py ;;  # needs fastapi, uvicorn, httpx, ray
    overhead) DRK_BENCH_REPEATS=1 timeout 150 python bench/hack_recall.py overhead ;;
    hacks:*) timeout ${T:-200} python bench/hack_recall.py ${step#hacks:} ;;
    *:*) timeout ${step#*:} python bench/eval_speed.py ${step%:*} ;;
    *) timeout ${T:-300} python bench/eval_speed.py $step ;;
  esac 2>&1 | grep -v "evaluate:" | tee -a $OUT/log.txt | tail -40
  echo "== step $step took $(( $(date +%s) - start )) s" | tee -a $OUT/log.txt
done
tar czf $OUT/baselines.tgz .cache/baselines .cache/copy_bandwidth.json
