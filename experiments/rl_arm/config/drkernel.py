# The second arm, once the correctness arm has shown its effect: Dr. Kernel's reward (correctness, speed and
# coverage), which needs timed and profiled evaluations (and so PRS can judge coverage again).
rollouts.reward = "drkernel"
rollouts.timing = True
update.prs = True
arm.run = "data/runs/2026-12-07_drkernel_arm"
