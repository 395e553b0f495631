# The control of issue 62: continued SFT from the same SFT model on the SFT and repair sets, with the same LoRA,
# optimizer, schedule and number of updates a step as the TRLOO arm (4 updates of 16 conversations), evaluated
# at the same steps. Does RL add what more supervised training cannot?
arm.kind = "sft"
arm.run = "data/runs/2026-12-07_sft_control"
# paired with the SFT model's records of the TRLOO arm's folder (the same model, evaluated once)
eval.sft_records = "data/runs/2026-12-07_trloo_arm/eval/sft.jsonl"
