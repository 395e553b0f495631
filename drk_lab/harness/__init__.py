"""One evaluation: a candidate ModelNew checked, run, timed and profiled against a task's reference.

Owns: tasks and their loaders (task, shapes), evaluate() and the baseline cache (evaluate, timing), the
isolation (caller -> zygote -> supervisor -> worker, one file each, speaking protocol.Job and RawResult;
processes, devices, entry, settings), what a worker does (warm, stages, models, correctness, timing,
gpu_clocks, profiler, ncu, launches, failures, gpulock) and whether it may serve again (reuse), and the
result (EvalResult).

May import: drk_lab.hacks (the checks it runs and the catalogue its results use); nothing above it
(agent, policies, rl, the command line). The hack checks in turn import only the harness's lower
modules (correctness, launches, models, processes, failures, timing, settings, result), so there is no
import circle; tests/test_layout.py holds both packages to this.
"""
