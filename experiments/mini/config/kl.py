# The recipe of the latest runs (LOG.md, 2026-12-05 on): RL with a KL penalty to the SFT model, evaluated on 256
# held-out tasks so that a difference of a few tasks is not the sample's.
rl.kl_coef = 0.1
eval.heldout = 256
