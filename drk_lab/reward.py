"""Stays: the public API names this path (`from drk_lab.reward import get_reward`); code in agent/rewards.py."""

from drk_lab.agent.rewards import REWARDS, bottleneck, drkernel, get_reward, kevin, tiered  # noqa: F401
