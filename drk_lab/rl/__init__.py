"""RL for kernel writers: turn-level advantages, rejection filters, rollouts, the trainer and the SFT cold start."""
