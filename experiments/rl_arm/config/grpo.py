# TRLOO against multi-turn GRPO (issue 62, if the budget allows): the same arm with GRPO's advantages.
update.advantage = "grpo"
arm.run = "data/runs/2026-12-07_grpo_arm"
