"""Data: where tasks and training rows come from besides the built-in suite.

Owns: public_sets (loaders for users' local copies of public data sets: Dr. Kernel's RL prompts and
cold-start trajectories, KernelBook's PyTorch/Triton pairs, a KernelBench checkout, each turned into
drk_lab Tasks and cold-start SFT rows with what was skipped and why) and kernelbench_format (a public
set's reference code rewritten into KernelBench format: the entry-point class renamed Model,
KernelBook's [args, kwargs] constructor inputs made positional).

May import: drk_lab.harness (Task and its checks), drk_lab.agent (the first prompt and code extraction,
so that SFT answers have the form the environment reads) and drk_lab.rl (only rl.sft's reading and
checking of the cold-start layout); nothing in the library imports data except the command line,
notebooks and benchmarks.
"""
