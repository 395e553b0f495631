"""Data: generated tasks, the programmatic teacher's trajectories, and the SFT and RL sets built from them."""
