"""Kernel writers: anything with generate(conversations, n, **sampling) -> completions.

Owns: base (Completion, the Policy protocol), scripted (replays answer files), huggingface (a local
transformers model, with token ids and log-probabilities), openai_compat (any OpenAI-compatible server,
with retries and a concurrency limit), evolve (the LLM-free evolutionary search) and launch_search (the
launch parameters it mutates).

May import: drk_lab.agent (code extraction) and drk_lab.harness (tasks, results); never rl.
"""
