"""Choosing a policy by name, as `drk eval --policy KIND[:ARG]` and the notebooks do: scripted:FOLDER,
evolve[:SEED_FOLDER], hf:MODEL_PATH or openai:MODEL."""

from __future__ import annotations

from pathlib import Path

from drk_lab.harness.task import DATA_DIR

SEED_DIR = DATA_DIR / "plain"  # plain Triton kernels, the evolutionary search's starting points
POLICY_KINDS = ("scripted:FOLDER", "evolve[:SEED_FOLDER]", "hf:MODEL_PATH", "openai:MODEL")


def seed_file(task, seed_dir: Path) -> Path | None:
    """seed_dir/level{L}/NAME.py (the layout of data/plain), else seed_dir/NAME.py."""
    for path in ([seed_dir / f"level{task.level}" / f"{task.name}.py"] if task.level is not None else []) + \
            [seed_dir / f"{task.name}.py"]:
        if path.is_file():
            return path
    return None


class TaskRouter:
    """Tells the evolutionary policy which task each conversation is for: run_many's prompts hold the
    task's source, not its name, so the first user message (the task's prompt) is looked up."""

    def __init__(self, policy, tasks: list):
        from drk_lab.agent.prompts import initial_prompt

        self.policy = policy
        self.names = {initial_prompt(t): t.name for t in tasks}
        self.observe = policy.observe

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling):
        names = [self.names[next(m["content"] for m in messages if m["role"] == "user")]
                 for messages in messages_batch]
        return self.policy.generate(messages_batch, n=n, task_names=names, **sampling)


def evolve_policy(tasks: list, seed_dir: str | Path = SEED_DIR, temperature: float = 1.0,
                  seed: int = 0) -> tuple[TaskRouter, list, list]:
    """(policy, tasks that have a seed kernel, tasks skipped for lack of one)."""
    from drk_lab.policies.evolve import EvolutionaryPolicy

    found = {t.name: seed_file(t, Path(seed_dir)) for t in tasks}
    kept = [t for t in tasks if found[t.name] is not None]
    skipped = [t for t in tasks if found[t.name] is None]
    seeds = {t.name: found[t.name].read_text() for t in kept}
    return TaskRouter(EvolutionaryPolicy(seeds, temperature=temperature, seed=seed), kept), kept, skipped


def policy_from_spec(spec: str, tasks: list, *, temperature: float | None = None, seed: int = 0,
                     max_tokens: int | None = None, base_url: str | None = None,
                     jobs: int | None = None) -> tuple[object, list, str | None]:
    """(policy, the tasks it can run, a note or None) for `KIND[:ARG]`; ValueError names what was wrong."""
    kind, _, arg = spec.partition(":")
    if kind == "scripted" and arg:
        from drk_lab.policies.scripted import ScriptedPolicy

        if not Path(arg).is_dir():
            raise ValueError(f"{spec}: no such folder (scripted:FOLDER replays the answer files in it)")
        return ScriptedPolicy(arg), tasks, None
    if kind == "evolve":
        if arg and not Path(arg).is_dir():
            raise ValueError(f"{spec}: no such folder (evolve:SEED_FOLDER holds level{{L}}/NAME.py seed kernels)")
        policy, kept, skipped = evolve_policy(tasks, arg or SEED_DIR, 1.0 if temperature is None else temperature, seed)
        note = (f"evolve: no seed kernel in {arg or SEED_DIR} for {len(skipped)} task(s), skipped: "
                + ", ".join(t.name for t in skipped)) if skipped else None
        return policy, kept, note
    if kind == "hf" and arg:
        from drk_lab.policies.huggingface import TransformersPolicy

        if not (Path(arg) / "config.json").is_file():  # else transformers would look for it on the hub
            raise ValueError(f"{spec}: not a model folder (expected a local folder with config.json, "
                             "as save_pretrained writes it)")

        return TransformersPolicy(arg, max_new_tokens=max_tokens or 2048, dtype="auto"), tasks, None
    if kind == "openai" and arg:
        from drk_lab.policies.openai_compat import OpenAIPolicy

        return OpenAIPolicy(arg, base_url=base_url, max_concurrency=jobs or 8), tasks, None
    needs = {k.partition(":")[0]: k for k in POLICY_KINDS if ":" in k and "[" not in k}
    if kind in needs and not arg:
        raise ValueError(f"{spec}: {kind} needs its argument ({needs[kind]})")
    raise ValueError(f"{spec}: not one of {', '.join(POLICY_KINDS)}")
