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

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from drk_lab.agent.episodes import ContextSchedule, Trajectory, Turn, build_messages, episode_schedule
from drk_lab.agent.env import KernelEnv, messages_tokens
from drk_lab.policies.base import Completion
from drk_lab.policies.huggingface import TransformersPolicy
from drk_lab.harness.task import Task

ENV_TURN = -1  # turn id of environment tokens


class TokenPrompt(list):
    """A prompt given as token ids: TokenPolicy feeds it to the model as it is."""


class TokenPolicy(TransformersPolicy):
    """TransformersPolicy that also takes TokenPrompt conversations (token ids, no chat template)."""

    def prompt_ids(self, messages) -> list[int]:
        if isinstance(messages, TokenPrompt):
            return list(messages)
        return super().prompt_ids(messages)

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
    logprobs: list[float]  # rollout log-probabilities of completion_ids (raw model, temperature 1)
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
class _Episode:
    env: KernelEnv
    trajectory: Trajectory
    initial_ids: list[int]
    tokens: list[TurnTokens] = field(default_factory=list)
    context: list[int] = field(default_factory=list)
    stopped: bool = False  # ended early: prompt or context too long

    @property
    def live(self) -> bool:
        return not self.env.done and not self.stopped

    def prompt(self) -> list[int]:
        ids = list(self.initial_ids)
        for i in self.context:
            ids += self.tokens[i].completion_ids + (self.tokens[i].glue_ids or [])
        return ids


@torch.no_grad()
def score_completion(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Raw log-probabilities of completion_ids after prompt_ids, from one teacher-forced forward pass."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + completion_ids], device=device)
    was_training = model.training
    model.eval()
    try:
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    finally:
        model.train(was_training)
    targets = torch.tensor(completion_ids, device=device)[:, None]
    return torch.log_softmax(logits, -1).gather(-1, targets).squeeze(-1).tolist()


def forced_completion(policy: TransformersPolicy, prompt_ids: list[int], text: str) -> Completion:
    tokenizer = policy.tokenizer
    stop = tokenizer.eos_token_id if tokenizer.eos_token_id in policy.stop_token_ids else policy.stop_token_ids[0]
    ids = encode(tokenizer, text) + [stop]
    return Completion(text=text, token_ids=ids, logprobs=score_completion(policy.model, prompt_ids, ids),
                      finish_reason="stop", extra={"forced": True})


def collect_rollouts(policy, tasks: list[Task], *, samples: int = 1, schedule: ContextSchedule | None = None,
                     reward_fn="drkernel", sampling: dict | None = None, seed: int | None = None,
                     feedback_tokens: int = 2048, max_prompt_tokens: int | None = None,
                     max_context_tokens: int | None = None, system_prompt: str | None = None,
                     force_responses: Callable[[Task, int, int], str | None] | None = None,
                     max_workers: int | None = None, **eval_kwargs) -> Rollout:
    """`samples` multi-turn episodes per task with a TransformersPolicy (see the module docstring).

    `sampling` goes to policy.generate (temperature, top_p, top_k, max_new_tokens); with `seed`, turn t
    samples with seed * 1000 + t, so the same call gives the same rollout. `force_responses(task,
    sample, turn)` may return a reply text to use instead of the sampled one. `eval_kwargs` go to
    drk_lab.harness.evaluate (device, correctness_trials, timing_trials, ...).
    """
    policy = TokenPolicy.wrap(policy)
    tokenizer = policy.tokenizer
    schedule = schedule or episode_schedule()
    sampling = dict(sampling or {})
    max_new = int(sampling.get("max_new_tokens", sampling.get("max_tokens", policy.max_new_tokens)))
    chat = policy.chat_template_kwargs
    stop_text = {i: tokenizer.decode([i]) for i in policy.stop_token_ids}
    stats = {"generation_s": 0.0, "evaluation_s": 0.0, "generated_tokens": 0, "prompt_tokens": 0,
             "forced_replies": 0, "prompt_too_long": 0, "context_full": 0, "turns": 0}

    episodes, group = [], []
    for g, task in enumerate(tasks):
        for s in range(samples):
            env = KernelEnv(task, max_turns=schedule.turns, reward_fn=reward_fn, tokenizer=tokenizer,
                            feedback_tokens=feedback_tokens, system_prompt=system_prompt, **eval_kwargs)
            prompt = env.reset()
            initial = policy.prompt_ids([dict(m) for m in env.messages])
            episode = _Episode(env, Trajectory(task.name, prompt, sample=s, reward_fn=env.reward_name,
                                               schedule=asdict(schedule), system_prompt=system_prompt), initial)
            if max_prompt_tokens is not None and len(initial) > max_prompt_tokens:
                episode.stopped = True
                stats["prompt_too_long"] += 1
            episodes.append(episode)
            group.append(g)

    workers = max_workers or max(1, min(len(episodes), os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as pool:
        for index in range(schedule.turns):
            live = []
            for e in (e for e in episodes if e.live):
                if max_context_tokens is not None and len(e.prompt()) + max_new > max_context_tokens:
                    e.stopped = True
                    stats["context_full"] += 1
                else:
                    live.append(e)
            if not live:
                break
            prompts = [e.prompt() for e in live]
            conversations = [build_messages(e.trajectory.prompt, e.trajectory.turns, e.context, system_prompt)
                             for e in live]
            turn_sampling = dict(sampling)
            if seed is not None:
                turn_sampling["seed"] = int(seed) * 1000 + index
            started = time.perf_counter()
            completions = [c[0] for c in policy.generate([TokenPrompt(p) for p in prompts], n=1, **turn_sampling)]
            if force_responses is not None:
                for k, e in enumerate(live):
                    text = force_responses(e.env.task, e.trajectory.sample, index)
                    if text is not None:
                        completions[k] = forced_completion(policy, prompts[k], text)
                        stats["forced_replies"] += 1
            stats["generation_s"] += time.perf_counter() - started
            stats["generated_tokens"] += sum(len(c.token_ids) for c in completions if not c.extra.get("forced"))
            stats["prompt_tokens"] += sum(len(p) for p in prompts)

            started = time.perf_counter()
            steps = list(pool.map(lambda ec: ec[0].env.step(ec[1].text, ec[1].finish_reason), zip(live, completions)))
            stats["evaluation_s"] += time.perf_counter() - started
            for e, prompt_ids, messages, completion, (feedback, reward, done, info) in zip(
                    live, prompts, conversations, completions, steps):
                glue = None
                if not done:
                    ended = completion.finish_reason == "stop" and completion.token_ids
                    glue = encode(tokenizer, feedback_glue(tokenizer, feedback, chat,
                                                           stop_text.get(completion.token_ids[-1]) if ended else None))
                e.tokens.append(TurnTokens(list(prompt_ids), list(completion.token_ids), list(completion.logprobs),
                                           glue, bool(completion.extra.get("forced"))))
                e.trajectory.turns.append(Turn(
                    task=e.env.task.name, index=index, iteration=schedule.iteration(index), context=list(e.context),
                    prompt_tokens=messages_tokens(messages, tokenizer),
                    prompt_chars=sum(len(m["content"]) for m in messages), response=completion.text,
                    finish_reason=completion.finish_reason, extraction=info["extraction"], code=info["code"],
                    result=info["result"], reward=reward, feedback=feedback, token_ids=list(completion.token_ids),
                    logprobs=list(completion.logprobs)))
                e.context = schedule.next_context(e.trajectory.turns, e.context)
                stats["turns"] += 1
    return Rollout([e.trajectory for e in episodes], [e.tokens for e in episodes], group, schedule.turns, stats)


# -- token batches -----------------------------------------------------------------------------
@dataclass
class SequenceBatch:
    """Padded token tensors of a rollout, one row per sequence, plus per-turn tensors per trajectory.

    Per sequence [N, L]: input_ids, attention_mask, model_mask (True on sampled tokens), rollout_logp
    (on model tokens, 0 elsewhere), turn_ids (turn index on model tokens, -1 elsewhere); traj_index[N].
    Per trajectory [B, T]: rewards, exists (the turn happened), coverage (NaN when unknown), correct
    (correct and not hacked), hacked, speedup (NaN when unknown); group[B].
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    model_mask: torch.Tensor
    rollout_logp: torch.Tensor
    turn_ids: torch.Tensor
    traj_index: torch.Tensor
    rewards: torch.Tensor
    exists: torch.Tensor
    coverage: torch.Tensor
    correct: torch.Tensor
    hacked: torch.Tensor
    speedup: torch.Tensor
    group: torch.Tensor
    padding_side: str = "right"

    PER_SEQUENCE = ("input_ids", "attention_mask", "model_mask", "rollout_logp", "turn_ids", "traj_index")

    @property
    def num_sequences(self) -> int:
        return self.input_ids.shape[0]

    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.long().cumsum(-1) - 1).clamp(min=0)

    def rows(self, index) -> dict[str, torch.Tensor]:
        """The per-sequence tensors of some rows, cut to the longest of them (padding side kept)."""
        index = torch.as_tensor(index, dtype=torch.long)
        out = {name: getattr(self, name)[index] for name in self.PER_SEQUENCE}
        width = int(out["attention_mask"].sum(-1).max()) if index.numel() else 0
        cut = slice(None, width) if self.padding_side == "right" else slice(-width if width else None, None)
        for name in self.PER_SEQUENCE[:-1]:
            out[name] = out[name][:, cut]
        out["position_ids"] = (out["attention_mask"].long().cumsum(-1) - 1).clamp(min=0)
        return out

    def token_values(self, per_turn: torch.Tensor, rows: dict | None = None) -> torch.Tensor:
        """per_turn[B, T] spread onto the model tokens of each sequence ([N, L]); 0 on other tokens."""
        rows = rows or {name: getattr(self, name) for name in self.PER_SEQUENCE}
        tid = rows["turn_ids"]
        per_turn = per_turn.to(tid.device)
        values = per_turn[rows["traj_index"][:, None].expand_as(tid), tid.clamp(min=0)]
        return torch.where(tid >= 0, values, torch.zeros_like(values))

    def per_trajectory(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Model-token values [N, L] regrouped per trajectory -> (values[B, M], mask[B, M]), in order."""
        b = self.rewards.shape[0]
        pieces = [[] for _ in range(b)]
        for row in range(self.num_sequences):
            pieces[int(self.traj_index[row])].append(values[row][self.model_mask[row]])
        flat = [torch.cat(p) if p else values.new_zeros(0) for p in pieces]
        width = max([len(f) for f in flat] + [1])
        out = values.new_zeros(b, width)
        mask = torch.zeros(b, width, dtype=torch.bool, device=values.device)
        for i, f in enumerate(flat):
            out[i, :len(f)] = f
            mask[i, :len(f)] = True
        return out, mask


def _sequences(tokens: list[TurnTokens]) -> list[tuple[list[int], list[bool], list[float], list[int]]]:
    """Chains of turns whose prompts extend each other -> (ids, model mask, log-probs, turn ids) each."""
    out, cur = [], None
    for t, turn in enumerate(tokens):
        if cur is not None:
            prev = tokens[t - 1]
            expected_len = len(cur[0]) + len(prev.glue_ids or [])
            continues = (prev.glue_ids is not None and len(turn.prompt_ids) == expected_len
                         and turn.prompt_ids == cur[0] + prev.glue_ids)
            if continues:
                n = len(prev.glue_ids)
                cur[0].extend(prev.glue_ids)
                cur[1].extend([False] * n)
                cur[2].extend([0.0] * n)
                cur[3].extend([ENV_TURN] * n)
            else:
                out.append(cur)
                cur = None
        if cur is None:
            n = len(turn.prompt_ids)
            cur = (list(turn.prompt_ids), [False] * n, [0.0] * n, [ENV_TURN] * n)
        m = len(turn.completion_ids)
        cur[0].extend(turn.completion_ids)
        cur[1].extend([True] * m)
        cur[2].extend(turn.logprobs)
        cur[3].extend([t] * m)
    if cur is not None:
        out.append(cur)
    return out


def _nan_if_none(x) -> float:
    return float("nan") if x is None else float(x)


def build_batch(rollout: Rollout, pad_token_id: int, padding_side: str = "right") -> SequenceBatch:
    """The rollout's sequences padded into tensors (see SequenceBatch and the module docstring)."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    rows, owner = [], []
    for b, tokens in enumerate(rollout.tokens):
        for seq in _sequences(tokens):
            rows.append(seq)
            owner.append(b)
    if not rows:  # no turn ran at all (prompts too long): one placeholder row that trains nothing
        rows, owner = [([pad_token_id], [False], [0.0], [ENV_TURN])], [0]
    n, width = len(rows), max([len(r[0]) for r in rows] + [1])
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    model_mask = torch.zeros((n, width), dtype=torch.bool)
    logp = torch.zeros((n, width), dtype=torch.float32)
    turn_ids = torch.full((n, width), ENV_TURN, dtype=torch.long)
    for i, (ids, mask, lps, tids) in enumerate(rows):
        cut = slice(0, len(ids)) if padding_side == "right" else slice(width - len(ids), width)
        input_ids[i, cut] = torch.tensor(ids, dtype=torch.long)
        attention[i, cut] = 1
        model_mask[i, cut] = torch.tensor(mask, dtype=torch.bool)
        logp[i, cut] = torch.tensor(lps, dtype=torch.float32)
        turn_ids[i, cut] = torch.tensor(tids, dtype=torch.long)

    b, t = len(rollout.trajectories), rollout.max_turns
    rewards, speedup = torch.zeros(b, t), torch.full((b, t), float("nan"))
    coverage = torch.full((b, t), float("nan"))
    exists, correct, hacked = (torch.zeros(b, t, dtype=torch.bool) for _ in range(3))
    for i, traj in enumerate(rollout.trajectories):
        for turn in traj.turns:
            rewards[i, turn.index] = float(turn.reward)
            exists[i, turn.index] = True
            coverage[i, turn.index] = _nan_if_none(turn.result.coverage)
            speedup[i, turn.index] = _nan_if_none(turn.result.speedup)
            correct[i, turn.index] = turn.result.ok
            hacked[i, turn.index] = bool(turn.result.hacked or turn.result.error_kind == "hacked")
    return SequenceBatch(input_ids, attention, model_mask, logp, turn_ids, torch.tensor(owner, dtype=torch.long),
                         rewards, exists, coverage, correct, hacked, speedup,
                         torch.tensor(rollout.group, dtype=torch.long), padding_side)
