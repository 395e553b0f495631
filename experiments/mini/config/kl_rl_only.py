# kl.py with the evaluation cut to held-out and seen tasks, so that a long RL arm fits one machine (the runs of
# 2026-12-06 on an H100); give rl.budget_s with --set.
rl.kl_coef = 0.1
eval.heldout = 256
eval.stts_tasks = 0
eval.builtin_levels = ()
