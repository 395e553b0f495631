"""One evaluation: a candidate ModelNew checked, run, timed and profiled against a task's reference.

Owns: tasks and their loaders (task, shapes, sizes), evaluate() and the baseline cache (evaluate,
baselines), the isolation (caller -> zygote -> supervisor -> worker, one file each, speaking protocol.Job
and RawResult; devices, entry, settings, guard, world, registries, triton_cache), what a worker does (warm, stages,
profiler, ncu, gpulock, validity) and whether it may serve again (reuse), and the result (EvalResult).

May import: drk_lab.common (what a worker measures with) and drk_lab.hacks (the checks it runs and the
catalogue its results use); nothing above it (service, agent, policies, rl, the command line). The hack
checks import drk_lab.common and never the harness, so the order reads common -> hacks -> harness;
tests/test_layout.py holds every package to it.
"""
