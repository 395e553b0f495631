"""EvolutionaryPolicy: an LLM-free search over launch and autotune parameters around the best kernel so far.

It is the baseline a learned policy must beat. It never edits what a kernel computes: it only changes
the parameters that drk_lab.policies.launch_search finds (BLOCK sizes, num_warps, num_stages, autotune configs).

Runners: call `generate` for proposals and `observe(task_name, code, result)` after every evaluation.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import threading
from collections import deque

from drk_lab.agent.env import extract_code as extract_reply_code
from drk_lab.policies.base import Completion
from drk_lab.policies.launch_search import mutate, neighbours, tunable_parameters

ELITE_SIZE = 5


def extract_code(text: str) -> str | None:
    """The last fenced python block of a message (the environment's rule), or None."""
    return extract_reply_code(text)[0]


def _hash(code: str) -> str:
    return hashlib.sha256(code.strip().encode()).hexdigest()[:16]


def _outcome(result) -> tuple[bool, float | None]:
    get = result.get if isinstance(result, dict) else (lambda k: getattr(result, k, None))
    ok = bool(get("correct")) and not get("hacked") and get("error_kind") is None
    speedup = get("speedup")
    return ok, (float(speedup) if ok and isinstance(speedup, (int, float)) and math.isfinite(speedup) else None)


_FAILED_WORDS = re.compile(r"\b(incorrect|not correct|mismatch|hacked|failed|wrong|error_kind)\b", re.IGNORECASE)


def parse_feedback(text: str) -> tuple[bool, float | None]:
    """(correct, speedup) read from environment feedback text: the fallback when observe() is not called."""
    correct = bool(re.search(r"\bcorrect\b", text, re.IGNORECASE)) and not _FAILED_WORDS.search(text)
    m = re.search(r"speedup\D{0,20}?(\d+(?:\.\d+)?)", text, re.IGNORECASE)
    return correct, (float(m.group(1)) if correct and m else None)


class _TaskState:
    def __init__(self, seed_code: str, memory: int):
        self.seed = seed_code
        self.memory: deque[dict] = deque(maxlen=memory)  # the last evaluations: hash, correct, speedup
        self.elite: list[dict] = []  # best correct codes: code, hash, speedup (mean), count, order
        self.proposed: set[str] = set()
        self.observed = False  # observe() was called for this task
        self.parsed: set[tuple[str, str]] = set()
        self.order = 0

    def record(self, code: str, ok: bool, speedup: float | None) -> None:
        h = _hash(code)
        self.memory.append({"hash": h, "correct": ok, "speedup": speedup})
        self.proposed.add(h)
        if not ok:
            return
        score = speedup if speedup is not None else 0.0
        for entry in self.elite:
            if entry["hash"] == h:  # the same code measured again: keep the mean
                entry["speedup"] = (entry["speedup"] * entry["count"] + score) / (entry["count"] + 1)
                entry["count"] += 1
                break
        else:
            self.order += 1
            self.elite.append({"code": code, "hash": h, "speedup": score, "count": 1, "order": self.order})
        self.elite.sort(key=lambda e: (-e["speedup"], e["order"]))  # ties: the earlier one stays the parent
        del self.elite[ELITE_SIZE:]


class EvolutionaryPolicy:
    """Proposes launch/autotune-parameter mutations of the best correct kernel seen per task.

    seed_code: one source (used for every task) or {task_name: source}. The first proposal for a task is
    its seed; every later one (and the other samples of that first call) is a mutation of the best correct
    kernel observed so far (the seed until something is correct), never a code proposed before while an
    unseen one can be found. Feed it with observe(task_name, code, result) after each evaluation; when
    observe is never called for a task, it reads speedups from the feedback in the conversation instead.
    """

    def __init__(self, seed_code: str | dict[str, str], temperature: float = 1.0, memory: int = 20, seed: int = 0):
        self.seeds = {"*": seed_code} if isinstance(seed_code, str) else dict(seed_code)
        self.temperature = temperature
        self.memory_size = memory
        self.rng = random.Random(seed)
        self.tasks: dict[str, _TaskState] = {}
        self.lock = threading.RLock()  # runners may observe from their evaluation threads

    def state(self, task_name: str) -> _TaskState:
        if task_name not in self.tasks:
            seed = self.seeds.get(task_name, self.seeds.get("*"))
            if seed is None:
                raise KeyError(f"EvolutionaryPolicy: no seed code for task {task_name!r}")
            self.tasks[task_name] = _TaskState(seed, self.memory_size)
        return self.tasks[task_name]

    def observe(self, task_name: str, code: str, result) -> None:
        """Record one evaluation (EvalResult or its dict) of `code` for a task."""
        with self.lock:
            if task_name not in self.tasks and task_name not in self.seeds and "*" not in self.seeds:
                self.seeds[task_name] = code  # an unknown task starts from the first code seen for it
            state = self.state(task_name)
            state.observed = True
            state.record(code, *_outcome(result))

    def best(self, task_name: str) -> tuple[str, float] | None:
        """(code, speedup) of the best correct kernel observed for a task (speedup 0.0 when untimed)."""
        state = self.tasks.get(task_name)
        return (state.elite[0]["code"], state.elite[0]["speedup"]) if state and state.elite else None

    def memory(self, task_name: str) -> list[dict]:
        return list(self.tasks[task_name].memory) if task_name in self.tasks else []

    def task_of(self, messages: list[dict]) -> str:
        names = [n for n in self.seeds if n != "*"]
        if not names:
            return "*"
        text = "\n".join(m["content"] for m in messages if m["role"] in ("system", "user"))
        hits = [n for n in names if n in text or n.rsplit("/", 1)[-1] in text]
        if not hits:
            raise ValueError("EvolutionaryPolicy: cannot tell the task of a conversation; pass task_names=[...]")
        return max(hits, key=len)

    def learn_from(self, state: _TaskState, messages: list[dict]) -> None:
        for answer, reply in zip(messages, messages[1:]):
            if answer["role"] != "assistant" or reply["role"] != "user":
                continue
            code = extract_code(answer["content"])
            key = (_hash(code or ""), _hash(reply["content"]))
            if code and key not in state.parsed:
                state.parsed.add(key)
                state.record(code, *parse_feedback(reply["content"]))

    def propose(self, state: _TaskState, temperature: float) -> tuple[str, dict]:
        parent = state.elite[0] if state.elite else None
        parent_code = parent["code"] if parent else state.seed
        info = {"parent": _hash(parent_code), "parent_speedup": parent["speedup"] if parent else None}
        if not state.proposed and not state.memory:
            state.proposed.add(_hash(state.seed))
            return state.seed, {**info, "kind": "seed", "changes": []}
        sites = tunable_parameters(parent_code)
        fallback = None
        for attempt in range(64):  # sampled at the policy's temperature, then the unseen neighbours, then wider
            if attempt == 16:
                unseen = [c for c in neighbours(parent_code, sites) if _hash(c[0]) not in state.proposed]
                if unseen:
                    found = self.rng.choice(unseen)
                    state.proposed.add(_hash(found[0]))
                    return found[0], {**info, "kind": "mutation", "changes": found[1]}
            found = mutate(parent_code, self.rng, temperature + 0.5 * (attempt // 16), sites)
            if found is None:
                break
            fallback = fallback or found
            if _hash(found[0]) not in state.proposed:
                state.proposed.add(_hash(found[0]))
                return found[0], {**info, "kind": "mutation", "changes": found[1]}
        if fallback:
            return fallback[0], {**info, "kind": "repeat", "changes": fallback[1]}
        return parent_code, {**info, "kind": "unchanged", "changes": []}

    def generate(self, messages_batch: list[list[dict]], n: int = 1, task_names: list[str] | None = None,
                 **sampling) -> list[list[Completion]]:
        """n proposals per conversation. task_names (one per conversation; or task_name=... for all) says which
        task each is for; without it a single seed serves all, or the task name is looked up in the prompt.
        LLM sampling arguments (temperature, max_tokens, ...) are ignored: the constructor's temperature
        sets the spread of the mutations."""
        with self.lock:
            return self._generate(messages_batch, n, task_names, self.temperature, sampling.get("task_name"))

    def _generate(self, messages_batch, n, task_names, temperature, task_name) -> list[list[Completion]]:
        out = []
        for i, messages in enumerate(messages_batch):
            name = task_names[i] if task_names else task_name or self.task_of(messages)
            state = self.state(name)
            if not state.observed:
                self.learn_from(state, messages)
            completions = []
            for _ in range(n):
                code, info = self.propose(state, temperature)
                completions.append(Completion(_answer(code, info), extra={"task": name, **info}))
            out.append(completions)
        return out


def _answer(code: str, info: dict) -> str:
    if info["kind"] == "seed":
        head = "Starting point: the seed kernel."
    elif info["changes"]:
        best = info["parent_speedup"]
        where = f" (speedup {best:.2f}x)" if best else ""
        head = f"Retuned the best kernel so far{where}: " + ", ".join(f"{lab} {a} -> {b}" for lab, a, b in info["changes"]) + "."
    else:
        head = "No tunable launch parameters found; the best kernel so far, unchanged."
    return f"{head}\n\n```python\n{code.rstrip()}\n```\n"
