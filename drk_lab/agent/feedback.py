"""Feedback: one evaluation as compact text for the model's next turn.

Status, metrics, kernel table and bottleneck, errors and what the candidate printed; the evaluation
part is cut in the middle to a token budget (real tokens when a tokenizer is given, else about 4
characters per token), then the request for a better ModelNew.
"""

from __future__ import annotations

from drk_lab.agent.extraction import NO_CODE_KIND
from drk_lab.agent.prompts import REQUEST_FASTER, REQUEST_FIX
from drk_lab.hacks.catalogue import ERROR_KINDS, HACK_REASONS
from drk_lab.harness.profiler import format_kernel_table
from drk_lab.harness.result import EvalResult


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
        meanings = "; ".join(f"{code}: {HACK_REASONS[code]}" for code in result.hack_reasons if code in HACK_REASONS)
        return f"REJECTED: reward hacking detected ({', '.join(result.hack_reasons) or 'hacked'})." + (
            f" {meanings}." if meanings else "")
    if result.error_kind == NO_CODE_KIND:
        return "NOT EVALUATED: " + result.error.removeprefix("no code: ") + "."
    if result.error_kind:
        return f"FAILED ({result.error_kind}): {ERROR_KINDS[result.error_kind].feedback}."
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
