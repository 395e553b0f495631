"""Multi-turn rollouts of a local transformers policy against KernelEnv, and the token batches RL trains on.

    rollout = collect_rollouts(policy, tasks, samples=4, schedule=episode_schedule(3), seed=0, device="cpu")
    batch = build_batch(rollout, pad_token_id=tokenizer.pad_token_id)

Token-in, token-out. Every turn's prompt is built from token ids, never by re-rendering earlier replies
as text: the first prompt is the chat template of the task prompt; each later prompt is the earlier
prompt's tokens, the sampled reply tokens exactly as sampled, then the environment's tokens (the end
of the assistant message the model did not write itself, the feedback as a user message, the
generation prompt), tokenised from the chat template's own text. So the sequence the trainer scores
is bit for bit the one the policy sampled from, and log-probability mismatch (MRS) measures the
engines, not re-tokenisation.

Sequences. With the default full context every turn's prompt extends the previous one, so a
trajectory is one sequence: model tokens (model_mask 1, turn id t, rollout log-prob) interleaved with
environment tokens (mask 0, turn id -1). When the context manager trimmed earlier turns (a rolling
window, STTS), the trimmed turn's prompt is not a continuation of the sequence so far: it starts a
new sequence (prompt and kept turns as environment tokens, only the new reply trained). A trajectory
is then several sequences (`traj_index` says whose) and the "sequence mean" of the loss counts each.

Lengths: `max_prompt_tokens` bounds the first prompt (a task above it gets no turns), `max_new_tokens`
each reply, `max_context_tokens` a turn's prompt plus its reply (an episode whose next turn would not
fit ends there), and the environment cuts feedback to `feedback_tokens` (real tokens).

Turns run in lockstep: one batched generate call per turn for all live episodes, then their
evaluations concurrently in threads (each in its own worker process). `force_responses` replaces some
replies by given text (tokenised, scored by the model in a teacher-forced pass); tests and off-policy
experiments use it to put known-good kernels into a batch.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from dataclasses import dataclass, field
from typing import Callable

import torch

from drk_lab.agent.context import ContextSchedule, episode_schedule
from drk_lab.agent.episodes import Episode, new_episode, run_episodes
from drk_lab.agent.trajectory import Trajectory
from drk_lab.harness.devices import gpu_index, resolve_device
from drk_lab.harness.gpulock import GpuLock
from drk_lab.harness.task import Task
from drk_lab.policies.base import Completion
from drk_lab.policies.huggingface import TransformersPolicy


class TokenPrompt(list):
    """A prompt given as token ids: TokenPolicy feeds it to the model as it is."""


class TokenPolicy(TransformersPolicy):
    """TransformersPolicy that also takes TokenPrompt conversations (token ids, no chat template)."""

    def prompt_ids(self, messages) -> list[int]:
        if isinstance(messages, TokenPrompt):
            return list(messages)
        return super().prompt_ids(messages)

    row_hook = None  # while a streaming generate runs: row_hook(row in the batch, completion) (rl/sampler.py)

    def generate(self, messages_batch, n: int = 1, on_complete=None, **sampling):
        """TransformersPolicy.generate; with `on_complete(row, completion)` (n=1) each reply is handed over as
        soon as it is decoded: a batch of rows when the next batch starts, or (rl/sampler.py) a row as soon as
        it stops while its batch decodes on. The pipelined driver evaluates them meanwhile."""
        if on_complete is None or n != 1:
            return super().generate(messages_batch, n, **sampling)
        decode, offset, sent = self._decode_batch, 0, set()

        def hand(row: int, completion: Completion) -> None:
            if row not in sent:
                sent.add(row)
                on_complete(row, completion)

        def streaming(*args):
            nonlocal offset
            start = offset
            self.row_hook = lambda k, completion: hand(start + k, completion)
            out = decode(*args)
            for k, completion in enumerate(out):
                hand(start + k, completion)
            offset += len(out)
            return out

        # why shadow the method for one call instead of a loop of our own: the rows, batches and generator are
        # then exactly the parent's, so streaming cannot change a sampled token
        self._decode_batch = streaming
        try:
            return super().generate(messages_batch, n, **sampling)
        finally:
            self.__dict__.pop("_decode_batch", None)
            self.__dict__.pop("row_hook", None)

    @classmethod
    def wrap(cls, policy: TransformersPolicy) -> TokenPolicy:
        if isinstance(policy, cls):
            return policy
        if not isinstance(policy, TransformersPolicy):
            raise TypeError("rollouts need a TransformersPolicy (token ids and log-probs), "
                            f"got {type(policy).__name__}")
        wrapped = cls.__new__(cls)
        wrapped.__dict__.update(policy.__dict__)
        return wrapped


# -- the chat template's environment text ------------------------------------------------------
_USER_MARK = "\u2063DRK_USER_CONTENT\u2063"
_REPLY_MARK = "\u2063DRK_REPLY_CONTENT\u2063"


def template_text(tokenizer, messages: list[dict], generation_prompt: bool, chat_kwargs: dict | None = None) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False,
                                         **(chat_kwargs or {}))


def feedback_glue(tokenizer, feedback: str, chat_kwargs: dict | None = None, stop_text: str | None = None) -> str:
    """The template's text from the end of an assistant reply's content to the next generation prompt
    with `feedback` as the user message between them. The reply sits in the history (not the last
    message), as it does when the template renders a longer conversation. When the model's reply
    ended with `stop_text` (its end-of-message token) and the template writes that text itself, it
    is dropped from the front: the model already emitted it."""
    rendered = template_text(tokenizer, [{"role": "user", "content": "u"},
                                         {"role": "assistant", "content": _REPLY_MARK},
                                         {"role": "user", "content": _USER_MARK}], True, chat_kwargs)
    start = rendered.find(_REPLY_MARK)
    if start < 0 or rendered.count(_USER_MARK) != 1:
        raise ValueError("cannot locate the reply and the user message in the chat template's output")
    glue = rendered[start + len(_REPLY_MARK):].replace(_USER_MARK, feedback)
    if stop_text and glue.startswith(stop_text):
        glue = glue[len(stop_text):]
    return glue


def encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# -- records -----------------------------------------------------------------------------------
@dataclass
class TurnTokens:
    prompt_ids: list[int]  # exactly what the model was given for this turn
    completion_ids: list[int]  # exactly what it produced (stop token included when sampled)
    logprobs: list[float]  # rollout log-probabilities of completion_ids under the model at the sampling temperature
    glue_ids: list[int] | None = None  # environment tokens after the reply up to the next generation prompt
    forced: bool = False  # the reply was supplied by force_responses, not sampled


@dataclass
class Rollout:
    trajectories: list[Trajectory]
    tokens: list[list[TurnTokens]]  # per trajectory, per turn
    group: list[int]  # per trajectory: index of its task in the tasks given (same prompt = same group)
    max_turns: int
    stats: dict = field(default_factory=dict)


@dataclass
class TokenEpisode(Episode):
    """An episode with its token records: the first prompt's ids and every turn's TurnTokens."""

    initial_ids: list[int] = field(default_factory=list)
    tokens: list[TurnTokens] = field(default_factory=list)

    def prompt(self) -> list[int]:
        """The next turn's prompt: the first prompt, then each kept turn's reply and environment tokens."""
        ids = list(self.initial_ids)
        for i in self.context:
            ids += self.tokens[i].completion_ids + (self.tokens[i].glue_ids or [])
        return ids


@torch.no_grad()
def score_completion(model, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0) -> list[float]:
    """Log-probabilities of completion_ids after prompt_ids under the model at `temperature` (1: raw), from
    one teacher-forced forward pass."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + completion_ids], device=device)
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    finally:
        model.train(was_training)
    targets = torch.tensor(completion_ids, device=device)[:, None]
    return torch.log_softmax(logits / temperature, -1).gather(-1, targets).squeeze(-1).tolist()


def forced_completion(policy: TransformersPolicy, prompt_ids: list[int], text: str,
                      temperature: float = 1.0) -> Completion:
    tokenizer = policy.tokenizer
    stop = tokenizer.eos_token_id if tokenizer.eos_token_id in policy.stop_token_ids else policy.stop_token_ids[0]
    ids = encode(tokenizer, text) + [stop]
    return Completion(text=text, token_ids=ids, logprobs=score_completion(policy.model, prompt_ids, ids, temperature),
                      finish_reason="stop", extra={"forced": True})


class TokenTurns:
    """The episode driver's hooks for RL (agent/episodes.py): token-id prompts, per-turn seeds, forced
    replies, and a TurnTokens record (with the environment's glue tokens) for every turn."""

    def __init__(self, policy: TokenPolicy, sampling: dict, seed: int | None, max_context_tokens: int | None,
                 force_responses, stats: dict):
        self.policy, self.sampling, self.seed = policy, sampling, seed
        self.max_context_tokens, self.force_responses, self.stats = max_context_tokens, force_responses, stats
        self.max_new = int(sampling.get("max_new_tokens", sampling.get("max_tokens", policy.max_new_tokens)))
        # away from 1 the record keeps the sampled distribution's log-probs (the policies' sampling_logprobs:
        # softmax(logits / T), RLSettings allows no truncation then), which the trainer scores alike
        self.temperature = float(sampling.get("temperature", 1.0))
        self.stop_text = {i: policy.tokenizer.decode([i]) for i in policy.stop_token_ids}

    def admit(self, e: TokenEpisode, index: int) -> bool:
        if self.max_context_tokens is not None and len(e.prompt()) + self.max_new > self.max_context_tokens:
            e.stopped = True
            self.stats["context_full"] += 1
            return False
        return True

    def generate(self, live: list[TokenEpisode], conversations: list[list[dict]], index: int, wave: int = 0,
                 on_complete=None) -> list[Completion]:
        """One completion per live episode, sampled with turn_seed; `on_complete(row, completion)` is called
        for each sampled reply as soon as the policy has it (a reply to be forced waits for the end)."""
        prompts = [e.prompt() for e in live]
        sampling = dict(self.sampling)
        if self.seed is not None:
            sampling["seed"] = turn_seed(self.seed, index, wave)
        stream = None
        if on_complete is not None:
            def stream(row: int, completion: Completion) -> None:
                e = live[row]
                if self.force_responses is None or self.force_responses(e.env.task, e.trajectory.sample, index) is None:
                    on_complete(row, completion)
        completions = [c[0] for c in self.policy.generate([TokenPrompt(p) for p in prompts], n=1, on_complete=stream,
                                                          **sampling)]
        if self.force_responses is not None:
            for k, e in enumerate(live):
                text = self.force_responses(e.env.task, e.trajectory.sample, index)
                if text is not None:
                    completions[k] = forced_completion(self.policy, prompts[k], text, self.temperature)
                    self.stats["forced_replies"] += 1
        sampled = [c for c in completions if not c.extra.get("forced")]
        self.stats["generated_tokens"] += sum(len(c.token_ids) for c in sampled)
        self.stats["sampled_replies"] += len(sampled)
        self.stats["cut_off_replies"] += sum(c.finish_reason == "length" for c in sampled)
        self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
        return completions

    def record(self, e: TokenEpisode, completion: Completion, info: dict, done: bool) -> None:
        glue = None
        if not done:  # the environment's tokens: end of the reply's message, the feedback, the next generation prompt
            ended = completion.finish_reason == "stop" and completion.token_ids
            glue = encode(self.policy.tokenizer, feedback_glue(
                self.policy.tokenizer, e.trajectory.turns[-1].feedback, self.policy.chat_template_kwargs,
                self.stop_text.get(completion.token_ids[-1]) if ended else None))
        forced = bool(completion.extra.get("forced"))
        logprobs = completion.logprobs if self.temperature == 1 or forced else completion.extra["sampling_logprobs"]
        e.tokens.append(TurnTokens(e.prompt(), list(completion.token_ids), list(logprobs), glue, forced))


def turn_seed(seed: int, index: int, wave: int = 0) -> int:
    """The sampling seed of turn `index` of wave `wave` (agent/pipeline.py); wave 0 keeps the seed every
    rollout had before waves existed, so a run of one wave samples what it always did."""
    base = int(seed) * 1000 + index
    return base if wave == 0 else (base * 1_000_003 + wave) % 2**63


def tasks_of_step(tasks: list, step: int, per_step: int, seed: int, shuffle: bool = True) -> list:
    """The `per_step` tasks of RL step `step`: passes over `tasks`, each in an order drawn from the seed
    and the pass. A pure function of the step, so a resumed run repeats it, and a run's prompts are known
    before it starts (their baselines can be measured ahead)."""
    orders = {}  # one shuffle per pass the step touches (at most two), not one per task
    chosen = []
    for j in range(step * per_step, (step + 1) * per_step):
        epoch, pos = divmod(j, len(tasks))
        if epoch not in orders:
            orders[epoch] = list(range(len(tasks)))
            if shuffle:
                random.Random(seed * 7919 + epoch).shuffle(orders[epoch])
        chosen.append(tasks[orders[epoch][pos]])
    return chosen


def collect_rollouts(policy, tasks: list[Task], *, samples: int = 1, schedule: ContextSchedule | None = None,
                     reward_fn="drkernel", sampling: dict | None = None, seed: int | None = None,
                     feedback_tokens: int = 2048, max_prompt_tokens: int | None = None,
                     max_context_tokens: int | None = None, system_prompt: str | None = None,
                     force_responses: Callable[[Task, int, int], str | None] | None = None,
                     max_workers: int | None = None, waves: int = 1, pipelined: bool = False,
                     eval_seed: int | None = None, **eval_kwargs) -> Rollout:
    """`samples` multi-turn episodes per task with a TransformersPolicy (see the module docstring).

    `sampling` goes to policy.generate (temperature, top_p, top_k, max_new_tokens); with `seed`, turn t
    samples with seed * 1000 + t, so the same call gives the same rollout. `force_responses(task,
    sample, turn)` may return a reply text to use instead of the sampled one. `eval_kwargs` go to
    drk_lab.evaluate (device, correctness_trials, timing_trials, ...). `waves` > 1 generates each turn in that
    many calls of whole groups; `pipelined` overlaps generation and evaluation (agent/pipeline.py), with the
    same samples and rewards as without. `eval_seed` fixes the evaluations' trial inputs (drk_lab.evaluate's
    `seed`, which `seed` here is not), so that feedback quoting them is the same text in two runs.
    """
    if eval_seed is not None:
        eval_kwargs["seed"] = eval_seed
    policy = TokenPolicy.wrap(policy)
    schedule = schedule or episode_schedule()
    stats = {"generated_tokens": 0, "prompt_tokens": 0, "forced_replies": 0, "prompt_too_long": 0, "context_full": 0,
             "sampled_replies": 0, "cut_off_replies": 0}
    episodes, group = [], []
    for g, task in enumerate(tasks):
        for s in range(samples):
            e = new_episode(task, schedule, s, reward_fn=reward_fn, tokenizer=policy.tokenizer,
                            feedback_tokens=feedback_tokens, system_prompt=system_prompt, **eval_kwargs)
            initial = policy.prompt_ids([dict(m) for m in e.env.messages])
            e = TokenEpisode(e.env, e.trajectory, e.context, initial_ids=initial)
            if max_prompt_tokens is not None and len(initial) > max_prompt_tokens:
                e.stopped = True
                stats["prompt_too_long"] += 1
            episodes.append(e)
            group.append(g)
    turns = TokenTurns(policy, dict(sampling or {}), seed, max_context_tokens, force_responses, stats)
    stats.update(run_episodes(episodes, turns, schedule, tokenizer=policy.tokenizer, max_workers=max_workers,
                              progress=False, waves=waves, pipelined=pipelined,
                              generation_guard=timing_guard(eval_kwargs) if pipelined else None))
    return Rollout([e.trajectory for e in episodes], [e.tokens for e in episodes], group, schedule.turns, stats)


# the folder of the harness's GPU locks: harness/caller.py's Sandbox.lock_dir (tests/agent/test_pipeline.py checks)
GPU_LOCK_DIR = os.path.join(tempfile.gettempdir(), "drk_gpu_locks")


def timing_guard(eval_kwargs: dict):
    """What a pipelined rollout holds while it generates: on a GPU with timed rewards, the harness's shared GPU
    lock, so that an evaluation's timing (the exclusive lock) waits for the generate call to end and never
    times its kernels beside the sampler's, while correctness trials (shared) run beside it; else nothing."""
    device = resolve_device(eval_kwargs.get("device"))
    if device == "cpu" or eval_kwargs.get("timing") is False:
        return contextlib.nullcontext
    return GpuLock(GPU_LOCK_DIR, gpu_index(device)).shared


def solution_replies(tasks: list[Task], sample: int = 0, turn: int = 0):
    """A force_responses callable: sample `sample` of every task answers turn `turn` with the project's
    solution, so that a model that writes no kernel yet (a random one, in a demo) still gives each group
    a reward signal. Never for real training runs."""
    from drk_lab.harness.task import builtin_solution

    solutions = {task.name: builtin_solution(task) for task in tasks}

    def force(task: Task, s: int, t: int) -> str | None:
        return f"```python\n{solutions[task.name]}```" if (s, t) == (sample, turn) else None
    return force
