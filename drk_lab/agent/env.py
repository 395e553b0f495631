"""KernelEnv: the multi-turn environment around one task.

    env = KernelEnv(task, max_turns=3, reward_fn="drkernel", device="cpu")
    prompt = env.reset()
    feedback, reward, done, info = env.step(response_text)

Each step takes the code out of a reply (extraction.py), evaluates it in the harness, scores it with a
reward function (rewards.py) and answers with feedback (feedback.py).
"""

from __future__ import annotations

from drk_lab.agent.extraction import extract_code, no_code_result
from drk_lab.agent.feedback import format_feedback
from drk_lab.agent.prompts import initial_prompt
from drk_lab.agent.rewards import get_reward
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import Task
from drk_lab.service.backends import evaluator


class KernelEnv:
    """One task, several turns: each step extracts the code of a reply, evaluates it, scores it and
    answers with feedback. `eval_kwargs` go to drk_lab.evaluate (device, timing, correctness_trials,
    timeout_s, ..., and `backend`: a `drk serve` URL or "ray" evaluates elsewhere). `messages` holds the
    whole conversation (system prompt if any, the prompt, then assistant reply / user feedback pairs; the
    last reply has no feedback message after it)."""

    def __init__(self, task: Task, max_turns: int = 3, reward_fn="drkernel", tokenizer=None,
                 feedback_tokens: int = 2048, target_speedup: float | None = None,
                 system_prompt: str | None = None, **eval_kwargs):
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.task = task
        self.max_turns = max_turns
        self.reward_name = reward_fn if isinstance(reward_fn, str) else getattr(reward_fn, "__name__", "custom")
        self.reward_fn = get_reward(reward_fn)
        self.tokenizer = tokenizer
        self.feedback_tokens = feedback_tokens
        self.target_speedup = target_speedup
        self.system_prompt = system_prompt
        self.eval_kwargs = eval_kwargs
        self.prompt: str | None = None
        self.messages: list[dict] = []
        self.turn = 0
        self.done = True

    def reset(self) -> str:
        self.prompt = initial_prompt(self.task)
        self.messages = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
        self.messages.append({"role": "user", "content": self.prompt})
        self.turn = 0
        self.done = False
        return self.prompt

    def evaluate(self, code: str) -> EvalResult:
        settings = dict(self.eval_kwargs)
        with evaluator(settings.pop("backend", None)) as chosen:
            return chosen.evaluate(self.task, code, **settings)

    def reached_target(self, result: EvalResult) -> bool:
        return (self.target_speedup is not None and result.ok and result.timings_valid
                and result.speedup is not None and result.speedup >= self.target_speedup)

    def step(self, response: str, finish_reason: str | None = None) -> tuple[str, float, bool, dict]:
        """Evaluate one reply -> (feedback, reward, done, info).

        info: "result" (EvalResult), "code" (None when nothing was evaluated), "extraction" (one of
        EXTRACTION_OUTCOMES), "turn" (1-based), "evaluated" (bool), "finish_reason".
        """
        if self.done:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        self.turn += 1
        self.messages.append({"role": "assistant", "content": response})
        code, extraction = extract_code(response, finish_reason)
        result = self.evaluate(code) if code is not None else no_code_result(extraction)
        reward = float(self.reward_fn(result))
        self.done = self.turn >= self.max_turns or self.reached_target(result)
        feedback = format_feedback(result, self.feedback_tokens, self.tokenizer, request=not self.done)
        if not self.done:
            self.messages.append({"role": "user", "content": feedback})
        info = {"result": result, "code": code, "extraction": extraction, "turn": self.turn,
                "evaluated": code is not None, "finish_reason": finish_reason}
        return feedback, reward, self.done, info
