"""A verl custom reward function that scores a reply through a `drk serve` evaluation service.

    reward.custom_reward_function.path=pkg://drk_lab.integrations.verl_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.url=http://evalnode:8471     # or $DRK_SERVICE_URL

verl's reward manager calls `compute_score(data_source, solution_str, ground_truth, extra_info)` once
per episode, with the decoded response as `solution_str`; the data set (verl_recipe.verl_rows) holds
the task's PyTorch source as `ground_truth` and its name as `extra_info["task_name"]`. The code is the
reply's last fenced python block (drk_lab.agent.extraction, as KernelEnv reads it); a reply without code
is scored as `no_code` without a request. Otherwise the code and the task's source go to the service
through drk_lab.service.client.ServiceClient (the one place that knows the wire format and the
retries), one client per process and settings, reused across calls, and the EvalResult is scored by a
drk_lab reward (`get_reward("drkernel")` by default).

The client retries connection errors, timeouts and 502/503/504 with a growing pause; any other error
status (a bad token, a malformed request) raises ServiceError at once, and so does a job that failed on
the server or did not finish within `timeout_s`. When every try fails ServiceError is raised too: a
failed evaluation is not the model's fault and must not become a reward of 0.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Any

from drk_lab.agent.extraction import extract_code, no_code_result
from drk_lab.agent.rewards import get_reward
from drk_lab.harness.result import EvalResult
from drk_lab.harness.task import task_from_source
from drk_lab.service.client import ServiceClient

URL_VARIABLE = "DRK_SERVICE_URL"
TOKEN_VARIABLE = "DRK_SERVICE_TOKEN"


@lru_cache(maxsize=16)
def _client(url: str, token: str | None, retries: int, backoff_s: float, pid: int) -> ServiceClient:
    # keyed by the pid: a forked reward worker must open its own connections, not share its parent's
    return ServiceClient(url, token=token, retries=retries, backoff_s=backoff_s)


def service_client(url: str | None = None, token: str | None = None, retries: int = 3,
                   backoff_s: float = 2.0) -> ServiceClient:
    """This process's client of the service at `url` ($DRK_SERVICE_URL) with `token` ($DRK_SERVICE_TOKEN),
    made on first use and reused; up to `retries` more tries after passing trouble, pausing backoff_s,
    2*backoff_s, ... between them."""
    url = url or os.environ.get(URL_VARIABLE)
    if not url:
        raise ValueError(f"no evaluation service: pass url= or set ${URL_VARIABLE}")
    token = token or os.environ.get(TOKEN_VARIABLE) or None
    return _client(url.rstrip("/"), token, retries, backoff_s, os.getpid())


def evaluate_remote(task_source: str, code: str, options: dict | None = None, *, task_name: str = "task",
                    url: str | None = None, token: str | None = None, timeout_s: float = 600.0,
                    retries: int = 3, backoff_s: float = 2.0) -> EvalResult:
    """Evaluate `code` against the task whose source is `task_source` on the service; ServiceError
    when the service gives no result within `timeout_s` (the job's wait, past the client's retries)."""
    client = service_client(url, token, retries, backoff_s)
    # parsed only (as the service does): the task's code runs where the evaluator runs it, not here
    task = task_from_source(task_source, task_name, check=False)
    return client.wait(client.submit(task, code, **(options or {})), timeout_s=timeout_s)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)  # verl's validation metrics skip None, a NaN would spoil the mean


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None, *,
                  url: str | None = None, token: str | None = None, reward: str = "drkernel",
                  reward_weights: dict | None = None, options: dict | None = None, timeout_s: float = 600.0,
                  retries: int = 3, backoff_s: float = 2.0, **ignored: Any) -> dict:
    """verl's custom reward function: {"score": the reward, and the result's main fields}.

    The keyword arguments come from `reward.custom_reward_function.reward_kwargs`; `options` go to the
    service's evaluate() (e.g. {"timing_trials": 100, "correctness_trials": 5}); `reward` and
    `reward_weights` choose the drk_lab reward. Every call returns the same keys (verl stacks them
    into per-episode columns): score, correct, hacked, speedup and coverage (None when unmeasured),
    evaluated (0 when the reply had no code), error_kind ("" when none).
    """
    code, outcome = extract_code(solution_str)
    if code is None:
        result = no_code_result(outcome)
    else:
        task_name = str((extra_info or {}).get("task_name") or "task")
        result = evaluate_remote(ground_truth, code, options, task_name=task_name, url=url, token=token,
                                 timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
    score = get_reward(reward, **(reward_weights or {}))(result)
    return {"score": float(score), "correct": float(bool(result.correct)), "hacked": float(bool(result.hacked)),
            "speedup": _number(result.speedup), "coverage": _number(result.coverage),
            "evaluated": float(code is not None), "error_kind": result.error_kind or ""}
