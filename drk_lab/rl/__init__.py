"""Training: multi-turn RL after Dr. Kernel, and the supervised cold start.

Owns: advantages (TRLOO, multi-turn GRPO, RLOO, in turn and token layouts), filters (mismatch and
profiling rejection sampling), rollout (token-exact multi-turn rollouts on the agent's episode driver),
sampler (fast batched sampling for Qwen3-style models), batch (padded token tensors with per-turn
rewards), logprobs (teacher-forced log-probs of token rows), loss (the clipped-ratio loss and the KL
penalty to the starting model), settings (RLSettings and its groups), trainer (RLTrainer on accelerate),
runlog (JSONL/CSV/wandb step rows), diagnostics (run-log series and flags), sft (the cold start on TRL),
pretrain (next-token pretraining of a small model), call_limit (stop before a step that would pass a
call's time limit) and tiny_model (a tiny Qwen3-style model and tokenizer built here, for tests, notebooks
and small runs).

May import: drk_lab.data (the data sets it trains on), drk_lab.policies, drk_lab.agent, drk_lab.harness,
drk_lab.hacks and drk_lab.common; nothing imports rl except the command line, notebooks, integrations,
viz, experiments and benchmarks.
"""
