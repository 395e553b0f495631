"""Reward hacking: the one catalogue of error kinds and hack codes, the static rules over a candidate's
syntax tree, and the runtime checks the worker runs around the candidate's forward.

Owns: catalogue (every error kind and hack code, the sentence a model reads for it, and the checks that
emit it; every other table derives from it), static/ (rules with facts, names and state: what the
code gives away before it runs, state kept across calls included), runtime_checks
(launches, a snapshot of what the candidate must leave alone, repeated and altered calls, another shape,
precision, freed memory, speed of light) with extra_calls and torch_work (PyTorch's share of the work);
and the generator of hacked and honest variants that measures them all (generator, with hack_classes,
hack_patches, obfuscation and honest_rewrites).

May import: torch and drk_lab.common (models, correctness, launches, timing, failures, processes), never the
harness, which runs these checks and imports them; the catalogue imports nothing from drk_lab at all.
"""
