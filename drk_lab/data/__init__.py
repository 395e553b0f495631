"""Data: new tasks composed from PyTorch operators, the programmatic teacher's trajectories, and the SFT and
RL sets built from them.

Owns: operators (the vocabulary: each operator's PyTorch statement, Triton expression, kind and where it may
go), spec (TaskSpec and its KernelBench-format source), generator (sampling, sizes, validation,
deduplication), splits (held-out operator combinations), kernels_rows and kernels_gemm (the teacher's
Triton pieces per turn style), teacher (a whole ModelNew and the reply per turn), trajectories (the
teacher as a Policy on the episode driver, resumable runs, the SFT keep rule, summaries), export (JSONL and
parquet rows, the RL prompt rows), cold_start (Dr. Kernel's cold-start SFT layout: read, checked, written,
and this project's trajectories turned into it) and command (`drk data`, added to the command line by
cli.py). public_sets
(loaders for users' local copies of public data sets: Dr. Kernel's RL prompts and cold-start trajectories,
KernelBook's PyTorch/Triton pairs, a KernelBench checkout, each turned into Tasks and cold-start SFT rows
with what was skipped and why) and kernelbench_format (a public set's reference rewritten into KernelBench
format).

May import: drk_lab.common (the correctness tolerances, models), drk_lab.harness (tasks, devices, baselines),
drk_lab.agent (the prompt, KernelEnv's episode driver, trajectories) and drk_lab.policies (the Completion a
policy returns); never rl, which reads its data sets from here (rl/sft.py trains on cold_start's rows).
"""
