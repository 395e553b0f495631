"""Hooks that plug drk_lab into training engines that run past one GPU (verl on Ray).

Owns: verl_estimator (TRLOO registered in verl's advantage-estimator registry, turn rewards laid out
on verl's token tensors), verl_reward (a verl custom reward function that sends the reply's code to a
`drk serve` evaluation service through its client and scores the result with a drk_lab reward), verl_recipe (the
rollout-correction settings that reproduce mismatch rejection, the Dr. Kernel recipe as verl
command-line overrides, and the verl data set built from drk tasks).

May import: drk_lab.rl (advantages, filter settings), drk_lab.agent (extraction, rewards, prompts),
drk_lab.harness (EvalResult, tasks) and drk_lab.service (its client, for verl_reward: this package sits
above the service as the command line does, so the reward function re-uses the service's wire format and
retries instead of keeping its own). verl itself is optional (the `verl` extra): nothing here imports
it at module level, and nothing in drk_lab imports this package except the command line and
benchmarks.
"""
