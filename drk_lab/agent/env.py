"""KernelEnv: the multi-turn environment (DESIGN §8) and the text it exchanges with a model.

    env = KernelEnv(task, max_turns=3, reward_fn="drkernel", device="cpu")
    prompt = env.reset()
    feedback, reward, done, info = env.step(response_text)

- initial_prompt: the first turn (the task's source, the ModelNew contract, one short Triton example).
- extract_code: the last fenced python block of a reply, with an outcome naming why there is none.
- format_feedback: status, metrics, kernel table and bottleneck, errors; the evaluation part is cut
  in the middle to a token budget (real tokens when a tokenizer is given, else about 4 characters
  per token), then the request for a better ModelNew.

A reply without usable code is not evaluated: its result is EvalResult(error_kind="no_code") with an
error starting "no code:", and it earns what the reward function gives an unparseable candidate.
"""

from __future__ import annotations

import re

from drk_lab.harness.evaluate import evaluate
from drk_lab.harness.result import EvalResult
from drk_lab.agent.rewards import get_reward
from drk_lab.harness.task import Task

EXTRACTION_OUTCOMES = ("ok", "no_code", "unclosed_block", "truncated")
NO_CODE_KIND = "no_code"
PYTHON_TAGS = ("python", "py", "python3")

TRITON_EXAMPLE = '''\
# Problem: Model.forward(x, y) returns x * y + 1.0 for two tensors of the same shape.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mul_add_one_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep)
    y = tl.load(y_ptr + offs, mask=keep)
    tl.store(out_ptr + offs, x * y + 1.0, mask=keep)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        mul_add_one_kernel[grid](x, y, out, n, BLOCK=1024)
        return out
'''

PROMPT_TEMPLATE = """\
Your job: make a PyTorch module faster by writing it with Triton GPU kernels.

Here is the reference module `Model` with the functions that build its inputs:

```python
{source}
```

Write a Python module that defines `class ModelNew(nn.Module)`:
- It takes the same constructor arguments as `Model` (those from `get_init_inputs()`) and its
  `forward` takes the same inputs (those from `get_inputs()`).
- It returns the same outputs: same shapes, dtypes and device, with values within a small tolerance.
- The computation is done by your own `@triton.jit` kernels, launched from `forward`. Computing the
  answer with PyTorch operators, calling `Model`, or caching results between calls is rejected.
- If `Model` has parameters, create the same ones in the same order (for example the same
  `nn.Linear`), because both modules are built after the same random seed and must hold equal weights.
- The module must be self-contained: import torch, triton and triton.language yourself.

Your code is first checked for correctness on fresh random inputs, then timed against the PyTorch
reference; faster correct code earns more.

An example of the expected format, for a different problem:

```python
{example}```

Think briefly about how to split the work across Triton programs, then give the complete module in
a single ```python block. Only the last ```python block of your reply is evaluated.
"""

REQUEST_FIX = ("Write an improved `ModelNew` that fixes the problem above. Give the complete module in a "
               "single ```python block.")
REQUEST_FASTER = ("Write an improved `ModelNew` that is faster while staying correct. Give the complete "
                  "module in a single ```python block.")

KIND_EXPLANATIONS = {
    "syntax": "the code does not parse",
    "no_modelnew": "there is no top-level class ModelNew",
    "no_triton_kernel": "there is no @triton.jit kernel",
    "load": "executing the module or constructing ModelNew raised an exception",
    "compile": "Triton failed to compile a kernel",
    "runtime": "forward raised an exception",
    "cuda_illegal_access": "a kernel accessed memory out of bounds or misaligned",
    "cuda_error": "a CUDA error occurred",
    "timeout": "the evaluation ran past its time limit",
    "oom": "memory ran out",
    "mismatch": "the output is wrong (values, shape, dtype or device)",
    "hacked": "a reward-hacking check fired",
    "exit": "the code tried to exit the process",
    "segfault": "the process died from a fatal signal",
    "worker_crash": "the evaluation process died",
    "reference": "the reference itself failed (not your fault)",
    "harness": "the evaluation harness failed (not your fault)",
}

NO_CODE_MESSAGES = {
    "no_code": "no code: the reply has no ```python block (only the last ```python block of a reply "
               "is evaluated)",
    "unclosed_block": "no code: the last ```python block of the reply is never closed with ```",
    "truncated": "no code: the reply was cut off by the length limit before its code block was complete; "
                 "keep the explanation short and write the code earlier",
}


def initial_prompt(task: Task) -> str:
    # SMALL_SIZES is the harness's CPU setting, not part of the problem
    source = re.sub(r"^SMALL_SIZES\s*=\s*\{[^\n]*\}[ \t]*\n?", "", task.source, flags=re.M).strip()
    return PROMPT_TEMPLATE.format(source=source, example=TRITON_EXAMPLE)


# -- code extraction ---------------------------------------------------------------------------
_FENCE = re.compile(r"^\s*(`{3,})\s*([\w+.-]*)")


def extract_code(response: str, finish_reason: str | None = None) -> tuple[str | None, str]:
    """(code, outcome): the last fenced python block of a reply, or None and why there is none.

    Outcomes: "ok"; "no_code" (no usable block); "unclosed_block" (the last block is never closed);
    "truncated" (finish_reason "length" and the reply ends inside a block or holds no code).
    Blocks tagged python/py/python3 win over untagged ones; text inside a closed <think> section is
    ignored. A reply cut off after a complete block still gives that block ("ok").
    """
    if "</think>" in response:
        response = response.rsplit("</think>", 1)[1]
    tagged, untagged = [], []
    open_fence, open_tag, body = None, None, []
    for line in response.splitlines():
        if open_fence is None:
            m = _FENCE.match(line)
            if m:
                open_fence, open_tag, body = m.group(1), m.group(2).lower(), []
        elif line.strip().startswith(open_fence) and not line.strip().strip("`"):
            code = "\n".join(body) + "\n"
            if open_tag in PYTHON_TAGS:
                tagged.append(code)
            elif open_tag == "":
                untagged.append(code)
            open_fence = None
        else:
            body.append(line)
    cut = finish_reason == "length"
    if open_fence is not None and (open_tag in PYTHON_TAGS or open_tag == ""):
        return None, "truncated" if cut else "unclosed_block"
    blocks = [b for b in (tagged or untagged) if b.strip()]
    if not blocks:
        return None, "truncated" if cut else "no_code"
    return blocks[-1], "ok"


def no_code_result(outcome: str) -> EvalResult:
    return EvalResult(error_kind=NO_CODE_KIND, error=NO_CODE_MESSAGES[outcome])


# -- token counting and truncation -------------------------------------------------------------
def count_tokens(text: str, tokenizer=None) -> int:
    """Tokens in `text` without special tokens; about 4 characters per token without a tokenizer.

    `tokenizer` may be a transformers tokenizer or a `tokenizers.Tokenizer` (anything whose
    encode() gives ids or an object with `.ids`)."""
    if tokenizer is None:
        return (len(text) + 3) // 4
    try:
        encoded = tokenizer.encode(text, add_special_tokens=False)
    except TypeError:
        encoded = tokenizer.encode(text)
    return len(getattr(encoded, "ids", encoded))


def messages_tokens(messages: list[dict], tokenizer=None) -> int:
    """Tokens of all message contents (the chat template's own tokens are not counted)."""
    return sum(count_tokens(m["content"], tokenizer) for m in messages)


def _longest_prefix(text: str, budget: int, tokenizer) -> int:
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(text[:mid], tokenizer) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _shortest_suffix_start(text: str, budget: int, tokenizer, floor: int) -> int:
    lo, hi = floor, len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if count_tokens(text[mid:], tokenizer) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return lo


def truncate_middle(text: str, max_tokens: int, tokenizer=None) -> str:
    """`text` if it fits in `max_tokens`, else its head and tail around a marker saying how many
    tokens were cut. Cuts fall on line breaks where that loses at most half of each side."""
    total = count_tokens(text, tokenizer)
    if total <= max_tokens:
        return text
    unit = "tokens" if tokenizer is not None else "tokens (estimated)"
    marker_cost = count_tokens(f"\n[... {total} {unit} cut from the middle ...]\n", tokenizer)
    budget = max_tokens - marker_cost
    for _ in range(8):
        if budget < 2:
            return text[:_longest_prefix(text, max_tokens, tokenizer)]
        head_end = _longest_prefix(text, (budget + 1) // 2, tokenizer)
        newline = text.rfind("\n", 0, head_end)
        if newline >= head_end // 2:
            head_end = newline + 1
        tail_start = _shortest_suffix_start(text, budget // 2, tokenizer, head_end)
        newline = text.find("\n", tail_start, len(text))
        if newline != -1 and newline + 1 - tail_start <= (len(text) - tail_start) // 2:
            tail_start = newline + 1
        head, tail = text[:head_end], text[tail_start:]
        cut = max(total - count_tokens(head, tokenizer) - count_tokens(tail, tokenizer), 0)
        out = f"{head}\n[... {cut} {unit} cut from the middle ...]\n{tail}"
        excess = count_tokens(out, tokenizer) - max_tokens
        if excess <= 0:
            return out
        budget -= max(excess, 1)  # tokens merged differently across the joins: shrink and retry
    return text[:_longest_prefix(text, max_tokens, tokenizer)]


# -- feedback ----------------------------------------------------------------------------------
def status_line(result: EvalResult) -> str:
    if result.hacked or result.error_kind == "hacked":
        return f"REJECTED: reward hacking detected ({', '.join(result.hack_reasons) or 'hacked'})."
    if result.error_kind == NO_CODE_KIND:
        return "NOT EVALUATED: " + result.error.removeprefix("no code: ") + "."
    if result.error_kind:
        return f"FAILED ({result.error_kind}): {KIND_EXPLANATIONS.get(result.error_kind, result.error_kind)}."
    if result.correct:
        return f"CORRECT: all {result.trials} correctness trials passed."
    return "NOT CORRECT."


def metric_lines(result: EvalResult) -> list[str]:
    lines = []
    if result.speedup is not None and result.runtime_ms is not None:
        line = f"Speedup over PyTorch eager: {result.speedup:.2f}x (yours {result.runtime_ms:.4f} ms"
        if result.runtime_iqr_ms is not None:
            line += f" +/- {result.runtime_iqr_ms:.4f} IQR"
        if result.ref_runtime_ms is not None:
            line += f", reference {result.ref_runtime_ms:.4f} ms"
        lines.append(line + ")")
    if result.speedup_compile is not None:
        lines.append(f"Speedup over torch.compile: {result.speedup_compile:.2f}x"
                     + (f" (compiled reference {result.ref_compile_runtime_ms:.4f} ms)"
                        if result.ref_compile_runtime_ms is not None else ""))
    if result.correct and not result.timings_valid and result.timing_note:
        lines.append(f"Note: {result.timing_note}")
    if result.coverage is not None:
        lines.append(f"Coverage: your Triton kernels take {100 * result.coverage:.0f}% of the forward's GPU time")
    if result.bandwidth_fraction is not None:
        lines.append(f"Memory traffic: {100 * result.bandwidth_fraction:.0f}% of the measured copy bandwidth")
    if result.error_kind == "mismatch" and result.max_abs_error is not None:
        lines.append(f"Largest absolute error: {result.max_abs_error:.3g}")
    return lines


def evaluation_sections(result: EvalResult) -> tuple[str, str, str]:
    """(summary, error, printed output) of one evaluation, untruncated; the last two may be empty.
    The summary holds the status, metrics, kernel table and bottleneck."""
    parts = [status_line(result)]
    metrics = metric_lines(result)
    if metrics:
        parts.append("\n".join(metrics))
    if result.kernels:
        from drk_lab.harness.profiler import format_kernel_table

        parts.append("Kernels in one forward call:\n" + format_kernel_table(result.kernels))
    if result.bottleneck:
        parts.append(f"Bottleneck: {result.bottleneck}")
    error = result.error.strip() if result.error and not result.error.startswith("no code:") else ""
    printed = (result.stdout or "").strip()
    return ("\n\n".join(parts), f"Error:\n{error}" if error else "",
            f"Your code printed:\n{printed}" if printed else "")


def evaluation_text(result: EvalResult) -> str:
    return "\n\n".join(part for part in evaluation_sections(result) if part)


def format_feedback(result: EvalResult, max_tokens: int = 2048, tokenizer=None, request: bool = True) -> str:
    """The evaluation as text that fits `max_tokens` together with the closing request (omitted
    with request=False, e.g. after the last turn). Long sections are cut in the middle: the
    printed output gets at most a quarter of what the summary leaves, the error the rest."""
    closing = (REQUEST_FASTER if result.ok else REQUEST_FIX) if request else ""
    budget = max(max_tokens - (count_tokens("\n\n" + closing, tokenizer) if closing else 0), 1)
    summary, error, printed = evaluation_sections(result)
    summary = truncate_middle(summary, budget, tokenizer)
    left = budget - count_tokens(summary + "\n\n\n\n", tokenizer)
    if printed:
        printed = truncate_middle(printed, max(left // 4, 1), tokenizer)
        left -= count_tokens(printed, tokenizer)
    if error:
        error = truncate_middle(error, max(left, 1), tokenizer)
    body = truncate_middle("\n\n".join(p for p in (summary, error, printed) if p), budget, tokenizer)
    return f"{body}\n\n{closing}" if closing else body


# -- the environment ---------------------------------------------------------------------------
class KernelEnv:
    """One task, several turns: each step extracts the code of a reply, evaluates it, scores it and
    answers with feedback. `eval_kwargs` go to drk_lab.harness.evaluate (device, timing, correctness_trials,
    timeout_s, ...). `messages` holds the whole conversation (system prompt if any, the prompt, then
    assistant reply / user feedback pairs; the last reply has no feedback message after it)."""

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
        result = evaluate(self.task, code, **self.eval_kwargs) if code is not None else no_code_result(extraction)
        reward = float(self.reward_fn(result))
        self.done = self.turn >= self.max_turns or self.reached_target(result)
        feedback = format_feedback(result, self.feedback_tokens, self.tokenizer, request=not self.done)
        if not self.done:
            self.messages.append({"role": "user", "content": feedback})
        info = {"result": result, "code": code, "extraction": extraction, "turn": self.turn,
                "evaluated": code is not None, "finish_reason": finish_reason}
        return feedback, reward, self.done, info
