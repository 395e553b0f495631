# A model three times the default's size (85.5M parameters with the tokenizer made here; LOG.md, 2026-12-05).
model.hidden_size = 768
model.num_layers = 12
model.num_heads = 12
model.intermediate_size = 2304
rl.kl_coef = 0.1
eval.heldout = 256
