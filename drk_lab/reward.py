"""Kept so that `from drk_lab.reward import get_reward` keeps working; the code is in agent/rewards.py."""

from drk_lab.agent.rewards import REWARDS, bottleneck, drkernel, get_reward, kevin, tiered  # noqa: F401
