"""One episode: the multi-turn environment around a task, and the loop that drives a policy through it.

Owns: prompts (the first message), extraction (the code in a reply), feedback (an evaluation as text
within a token budget), env (KernelEnv: reset / step), rewards (pure functions of an EvalResult),
context (which earlier turns a prompt holds; STTS), trajectory (Turn, Trajectory, JSONL), episodes (the
one episode driver that `drk eval` and RL rollouts share), pipeline (the same driver with generation
and evaluation overlapped: waves, replies evaluated as they finish), metrics (Fast@p, geomean, tables).

May import: drk_lab.harness (evaluate, results, tasks), drk_lab.hacks (the catalogue's sentences) and
drk_lab.service.backends (a KernelEnv given `backend=` evaluates on a Ray pool or a `drk serve` service).
Policies plug in through a duck-typed generate(); nothing here imports a policy.
"""
