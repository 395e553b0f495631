"""Operator drills on a CPU: can a small model learn them (learnability.py), and does RL teach them (rl.py)?"""
