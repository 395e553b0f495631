"""A verl custom reward function that scores a reply through a drk evaluation service.

    reward.custom_reward_function.path=pkg://drk_lab.integrations.verl_reward
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.url=http://evalnode:8000     # or $DRK_SERVICE_URL

verl's reward manager calls `compute_score(data_source, solution_str, ground_truth, extra_info)` once
per episode, with the decoded response as `solution_str`; the data set (verl_recipe.verl_rows) holds
the task's PyTorch source as `ground_truth`. The code is the reply's last fenced python block
(drk_lab.agent.extraction, as KernelEnv reads it); a reply without code is scored as `no_code`
without a request. Otherwise the code goes to the service (`drk serve`, on the GPU nodes):

    POST {url}/v1/evaluate   Authorization: Bearer {token}
         {"task_source": str, "code": str, "options": {...evaluate() keywords...}}
    200  {"result": EvalResult.to_dict()}      4xx/5xx {"error": str, "detail": ...}

and the EvalResult is scored by a drk_lab reward (`get_reward("drkernel")` by default). Connection
errors, timeouts, 429 and 5xx are retried with a growing pause; other 4xx (a bad token, a malformed
request) are not. When every try fails, ServiceError is raised: a failed evaluation is not the
model's fault and must not become a reward of 0.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from drk_lab.agent.extraction import extract_code, no_code_result
from drk_lab.agent.rewards import get_reward
from drk_lab.harness.result import EvalResult

URL_VARIABLE = "DRK_SERVICE_URL"
TOKEN_VARIABLE = "DRK_SERVICE_TOKEN"
RETRIED_STATUS = {429, 500, 502, 503, 504}


class ServiceError(RuntimeError):
    """The evaluation service did not give a result; `retryable` says whether trying again may help."""

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def service_call(client: httpx.Client, url: str, token: str | None, task_source: str, code: str,
                 options: dict | None) -> EvalResult:
    """One request to the service: the request as the service's API wants it, and its answer parsed.
    (The one place that knows the wire format.)"""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"task_source": task_source, "code": code, "options": dict(options or {})}
    endpoint = url.rstrip("/") + "/v1/evaluate"
    try:
        response = client.post(endpoint, json=body, headers=headers)
    except httpx.TransportError as e:  # refused, reset, timed out
        raise ServiceError(f"drk service at {endpoint}: {type(e).__name__}: {e}", retryable=True) from None
    if response.status_code != 200:
        try:
            payload = response.json()
            why = f"{payload.get('error')}: {payload.get('detail')}"
        except ValueError:
            why = response.text[:200]
        raise ServiceError(f"drk service at {endpoint}: HTTP {response.status_code}: {why}",
                           retryable=response.status_code in RETRIED_STATUS)
    try:
        return EvalResult.from_dict(response.json()["result"])
    except (ValueError, KeyError, TypeError) as e:
        raise ServiceError(f"drk service at {endpoint}: an answer without a result ({e})", retryable=False) from None


def evaluate_remote(task_source: str, code: str, options: dict | None = None, *, url: str | None = None,
                    token: str | None = None, timeout_s: float = 600.0, retries: int = 3,
                    backoff_s: float = 2.0) -> EvalResult:
    """Evaluate `code` against `task_source` on the service at `url` ($DRK_SERVICE_URL), with `token`
    ($DRK_SERVICE_TOKEN); up to `retries` more tries after a retryable failure, pausing backoff_s,
    2*backoff_s, ... between them."""
    url = url or os.environ.get(URL_VARIABLE)
    if not url:
        raise ValueError(f"no evaluation service: pass url= or set ${URL_VARIABLE}")
    token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
    with httpx.Client(timeout=timeout_s) as client:
        for attempt in range(retries + 1):
            try:
                return service_call(client, url, token, task_source, code, options)
            except ServiceError as e:
                if not e.retryable or attempt == retries:
                    raise
            time.sleep(backoff_s * 2 ** attempt)
    raise AssertionError("unreachable")


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
        result = evaluate_remote(ground_truth, code, options, url=url, token=token, timeout_s=timeout_s,
                                 retries=retries, backoff_s=backoff_s)
    score = get_reward(reward, **(reward_weights or {}))(result)
    return {"score": float(score), "correct": float(bool(result.correct)), "hacked": float(bool(result.hacked)),
            "speedup": _number(result.speedup), "coverage": _number(result.coverage),
            "evaluated": float(code is not None), "error_kind": result.error_kind or ""}
