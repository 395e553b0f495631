#!/bin/bash
# One device call on the H200: GPU tests and benchmark phases, logs and the baseline cache under $OUT.
#   bench/gpu_run.sh tests latency:100 throughput:150 fresh:120 stability:200 hacks:recall hacks:false_positives overhead
#   bench/gpu_run.sh service:540          # the service on one H200 (after installing .whl: bench/device_wheels.sh)
#   bench/gpu_run.sh multigpu:540         # several GPUs: the service with one Ray actor per GPU, on one GPU and all
#   RL_SERVE=1 bench/gpu_run.sh rlmulti:540   # the RL trainer on 1 GPU and all, evaluating through a Ray service
# A step NAME:SECONDS runs bench/eval_speed.py NAME with that time limit. Carry .cache/baselines and
# .cache/copy_bandwidth.json (from a previous $OUT/baselines.tgz) to skip recomputing the baselines.
export PYTHONPATH=$PWD DRK_CACHE_DIR=$PWD/.cache
export DRK_REUSE_LOG=${DRK_REUSE_LOG:-$OUT/reuse.jsonl}  # why each warm worker retired (comes back with $OUT)
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > $OUT/smi.txt
for step in "$@"; do
  start=$(date +%s)
  case $step in
    tests) timeout ${T:-300} python -m pytest -q -m gpu tests/harness/test_gpu.py -p no:cacheprovider -rA > $OUT/gpu_tests.txt 2>&1 ;;
    unlocked:*) DRK_LIFECYCLE_LOCK=0 timeout 120 python bench/eval_speed.py ${step#*:} ;;  # A/B of the lifecycle lock
    warm16) DRK_WARM_WORKERS=16 timeout 90 python bench/eval_speed.py throughput_fork ;;
    spare0:*) DRK_SPARE_WORKERS=0 timeout 120 python bench/eval_speed.py ${step#*:} ;;  # A/B: no workers beyond the slots
    fresh:*) DRK_WORKER_USES=1 timeout ${step#*:} python bench/eval_speed.py throughput_fork ;;  # no worker reuse
    profcost) timeout 200 python bench/profiler_cost.py ;;
    gputime) timeout 300 python bench/gpu_time.py ;;  # device time of one evaluation, stage by stage
    rl:*) PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/rl_run.py --random-hidden 1024 --random-layers 8 \
            --force-solutions --steps 3 --log-dir /tmp/rl_log ;;  # needs trl and datasets: see BENCHMARKS.md
    ncu) timeout 240 python bench/ncu_check.py ;;
    # service*, multigpu, rlmulti need wheels: bench/device_wheels.sh here, then the install line it prints
    service:*) PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/service_gpu.py ;;  # both phases
    multigpu:*) PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/service_gpu.py multi_gpu \
            --copies ${COPIES:-8} --in-flight 16 --multi-gpu-pool ${MULTI_GPU_POOL:-auto} ;;  # threads: no Ray
    rlmulti:*) OUT=/tmp/rl_multi PYTHONPATH=/tmp/site:$PWD timeout ${step#*:} python bench/rl_multi_gpu.py \
            --compare 1,$(nvidia-smi -L | wc -l) --random-hidden 1024 --random-layers 8 --steps ${RL_STEPS:-3} \
            --prompts-per-gpu 2 --samples 4 --turns 2 --max-new-tokens 512 --force-solutions ${RL_SERVE:+--serve}
            cp /tmp/rl_multi/rl_multi_gpu.json $OUT/ ;;  # not the model and logs: few files come back from $OUT
    overhead) DRK_BENCH_REPEATS=1 timeout 150 python bench/hack_recall.py overhead ;;
    hacks:*) timeout ${T:-200} python bench/hack_recall.py ${step#hacks:} ;;
    *:*) timeout ${step#*:} python bench/eval_speed.py ${step%:*} ;;
    *) timeout ${T:-300} python bench/eval_speed.py $step ;;
  esac 2>&1 | grep -v "evaluate:" | tee -a $OUT/log.txt | tail -40
  echo "== step $step took $(( $(date +%s) - start )) s" | tee -a $OUT/log.txt
done
tar czf $OUT/baselines.tgz .cache/baselines .cache/copy_bandwidth.json
