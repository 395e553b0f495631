"""Data: new tasks composed from PyTorch operators, the programmatic teacher's trajectories, and the SFT and
RL sets built from them.

Owns: operators (the vocabulary: each operator's PyTorch statement, Triton expression, kind and where it may
go), spec (TaskSpec and its KernelBench-format source), generator (sampling, sizes, validation,
deduplication), splits (held-out operator combinations), kernels_rows and kernels_gemm (the teacher's
Triton pieces per turn style), teacher (a whole ModelNew and the reply per turn), trajectories (the
teacher as a Policy on the episode driver, resumable runs, the SFT keep rule, summaries), export (JSONL and
parquet rows, the RL prompt rows) and command (`drk data`, added to the command line by cli.py). public_sets
(loaders for users' local copies of public data sets: Dr. Kernel's RL prompts and cold-start trajectories,
KernelBook's PyTorch/Triton pairs, a KernelBench checkout, each turned into Tasks and cold-start SFT rows
with what was skipped and why) and kernelbench_format (a public set's reference rewritten into KernelBench
format).

May import: drk_lab.harness (tasks, the correctness tolerances, devices), drk_lab.agent (the prompt,
KernelEnv's episode driver, trajectories), drk_lab.policies (the Completion a policy returns) and drk_lab.rl
(the cold-start layout of rl/sft.py); nothing imports data except the command line, tests and benchmarks.
"""
