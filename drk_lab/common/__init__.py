"""What both the harness and the hack checks run on, below both: a worker's measuring instruments.

Owns: models (the reference and candidate modules built from a job's files, same-seed weights, each trial's
inputs, the library and harness versions), correctness (tolerances, output comparison, freed-memory
poisoning, input mutation), launches (the hook on Triton's launch entry points: which kernels ran, or
switching them off), timing (CUDA-event timing with an L2 flush), gpu_clocks (the SM clock and its
slowdown reasons, from NVML), failures (EvaluationFailure and the error kind of an exception) and
processes (/proc walks, killing process trees, a worker's kernel settings).

May import: torch and triton, nothing from drk_lab; the hacks (above it) and the harness (above the
hacks) import it, so neither needs the other's modules to measure.
"""
