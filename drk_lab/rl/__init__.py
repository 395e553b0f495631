"""Training: multi-turn RL after Dr. Kernel, and the supervised cold start.

Owns: advantages (TRLOO, multi-turn GRPO, RLOO, in turn and token layouts), filters (mismatch and
profiling rejection sampling), rollout (token-exact multi-turn rollouts on the agent's episode driver),
batch (padded token tensors with per-turn rewards), logprobs (teacher-forced log-probs of token rows), loss
(the clipped-ratio loss and the KL penalty to the starting model), settings (RLSettings),
trainer (RLTrainer on accelerate), runlog (JSONL/CSV/wandb step rows), sft (the cold start on TRL).

May import: drk_lab.agent, drk_lab.policies, drk_lab.harness and drk_lab.hacks; nothing imports rl
except the command line, notebooks, benchmarks and drk_lab.data (which reads and checks the cold-start
layout through rl.sft).
"""
