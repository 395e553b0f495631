"""Finding the code in a model's reply: the last fenced python block, or why there is none.

A reply without usable code is not evaluated: its result is EvalResult(error_kind="no_code") with an
error starting "no code:", and it earns what the reward function gives an unparseable candidate.
"""

from __future__ import annotations

import re

from drk_lab.harness.result import EvalResult

EXTRACTION_OUTCOMES = ("ok", "no_code", "unclosed_block", "truncated")
NO_CODE_KIND = "no_code"
PYTHON_TAGS = ("python", "py", "python3")

NO_CODE_MESSAGES = {
    "no_code": "no code: the reply has no ```python block (only the last ```python block of a reply "
               "is evaluated)",
    "unclosed_block": "no code: the last ```python block of the reply is never closed with ```",
    "truncated": "no code: the reply was cut off by the length limit before its code block was complete; "
                 "keep the explanation short and write the code earlier",
}


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
