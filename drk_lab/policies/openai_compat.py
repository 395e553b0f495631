"""A policy that asks any OpenAI-compatible chat server (OpenAI, vLLM, SGLang, llama.cpp, ...).

    policy = OpenAIPolicy("Qwen/Qwen3-8B", base_url="http://localhost:8000/v1")
    completions = policy.generate(messages_batch, n=4, temperature=1.0, max_new_tokens=2048)

POSTs {base_url}/chat/completions with the standard library (no client package needed). `base_url` and
`api_key` default to the environment (OPENAI_BASE_URL, OPENAI_API_KEY); a base URL without a path gets
"/v1". Requests for a batch run in a thread pool of `max_concurrency`. Each request is retried with
exponential backoff (honouring Retry-After) on HTTP 429 and 5xx, on connection errors and on timeouts;
other 4xx answers fail at once. `timeout_s` bounds each socket operation (connecting, and each wait for
data), not the whole request. After the retries an OpenAIPolicyError says what went wrong.

n completions per conversation are asked for with the request's `n`; when the server returns fewer
(some ignore `n`), the missing ones are asked for again one at a time. Set `supports_n=False` for
servers that reject `n`. With `logprobs=True` (the default) the server is asked for per-token
log-probabilities; they land in Completion.logprobs when it returns them (vLLM returns the raw model
log-probabilities by default). Token ids are filled when the server returns them (vLLM with
`extra_body={"return_token_ids": True}`). `extra_body` is merged into every request (e.g.
{"chat_template_kwargs": {"enable_thinking": False}}).
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException

from drk_lab.policies.base import Completion

SAMPLING_TO_REQUEST = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",  # not in OpenAI's API; vLLM and SGLang accept it
    "max_new_tokens": "max_tokens",
    "max_tokens": "max_tokens",
    "seed": "seed",
}


class OpenAIPolicyError(RuntimeError):
    """A chat request that failed for good: `status` is the last HTTP status (None for network errors or
    timeouts), `attempts` how many requests were sent."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 0):
        super().__init__(message)
        self.status = status
        self.attempts = attempts


class _Retryable(Exception):
    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def chat_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if urllib.parse.urlparse(base).path in ("", "/"):
        base += "/v1"
    return base + "/chat/completions"


def parse_choice(choice: dict) -> Completion:
    message = choice.get("message") or {}
    content = message.get("content") or ""
    logprobs = token_ids = None
    tokens = None
    entries = (choice.get("logprobs") or {}).get("content")
    if entries:
        logprobs = [float(e["logprob"]) for e in entries]
        tokens = [e.get("token") for e in entries]
    if choice.get("token_ids") is not None:
        token_ids = [int(t) for t in choice["token_ids"]]
    extra = {"finish_reason": choice.get("finish_reason")}
    if tokens is not None:
        extra["tokens"] = tokens
    if message.get("reasoning_content"):
        extra["reasoning_content"] = message["reasoning_content"]
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    return Completion(text=content, token_ids=token_ids, logprobs=logprobs, finish_reason=finish, extra=extra)


class OpenAIPolicy:
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        logprobs: bool = True,
        supports_n: bool = True,
        extra_body: dict | None = None,
    ):
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.model = model
        self.url = chat_url(base_url)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.max_concurrency = max(1, int(max_concurrency))
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.logprobs = logprobs
        self.supports_n = supports_n
        self.extra_body = dict(extra_body or {})

    def generate(self, messages_batch: list[list[dict]], n: int = 1, **sampling) -> list[list[Completion]]:
        """n completions per conversation. Sampling: temperature, top_p, top_k, max_new_tokens (alias
        max_tokens), seed; what is not given is left to the server's defaults."""
        unknown = set(sampling) - set(SAMPLING_TO_REQUEST)
        if unknown:
            raise ValueError(f"unknown sampling parameters {sorted(unknown)}; known: {sorted(SAMPLING_TO_REQUEST)}")
        params = {SAMPLING_TO_REQUEST[k]: v for k, v in sampling.items() if v is not None}
        out: list[list[Completion]] = [[] for _ in messages_batch]
        if self.supports_n:
            want = [(i, n) for i in range(len(messages_batch))]
        else:
            want = [(i, 1) for i in range(len(messages_batch)) for _ in range(n)]
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            for round_ in range(n + 1):
                jobs = [(i, pool.submit(self.request, messages_batch[i], k, params)) for i, k in want]
                try:
                    for i, job in jobs:
                        out[i].extend(job.result())
                except BaseException:
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
                short = [(i, n - len(out[i])) for i in range(len(out)) if len(out[i]) < n]
                if not short:
                    break
                if round_ > 0 and sum(k for _, k in short) >= len(want):
                    raise OpenAIPolicyError(f"{self.url} returned no choices for {len(short)} conversation(s)")
                want = [(i, 1) for i, k in short for _ in range(k)]  # servers that ignore n: one at a time
        return [completions[:n] for completions in out]

    def request(self, messages: list[dict], n: int, params: dict) -> list[Completion]:
        """One chat request (with retries) -> its choices as Completions, in the server's order."""
        body = {"model": self.model, "messages": messages, **params, **self.extra_body}
        if n != 1:
            body["n"] = n
        if self.logprobs:
            body["logprobs"] = True
        reply = self._post_with_retries(body)
        if not reply.get("choices") and reply.get("error"):
            raise OpenAIPolicyError(f"POST {self.url}: the server answered with an error: {reply['error']}")
        choices = sorted(reply.get("choices") or [], key=lambda c: c.get("index", 0))
        completions = [parse_choice(c) for c in choices]
        for completion in completions:
            completion.extra["usage"] = reply.get("usage")
        return completions

    def _post_with_retries(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: _Retryable | None = None
        for attempt in range(self.max_retries + 1):
            if last is not None:
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
                if last.retry_after is not None:
                    delay = max(delay, min(last.retry_after, self.max_backoff_s))
                time.sleep(delay)
            try:
                return self._post_once(data, headers)
            except _Retryable as error:
                last = error
            except OpenAIPolicyError as error:
                error.attempts = attempt + 1
                raise
        raise OpenAIPolicyError(
            f"POST {self.url} failed after {self.max_retries + 1} attempt(s): {last}",
            status=last.status,
            attempts=self.max_retries + 1,
        )

    def _post_once(self, data: bytes, headers: dict) -> dict:
        request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            detail = error.read()[:1000].decode(errors="replace")
            if error.code == 429 or error.code >= 500:
                raise _Retryable(f"HTTP {error.code}: {detail}", error.code, _retry_after(error.headers)) from None
            raise OpenAIPolicyError(f"POST {self.url}: HTTP {error.code}: {detail}", error.code, 1) from None
        except urllib.error.URLError as error:
            if isinstance(error.reason, (TimeoutError, socket.timeout)):
                raise _Retryable(f"timed out after {self.timeout_s} s") from None
            raise _Retryable(f"connection error: {error.reason}") from None
        except (TimeoutError, socket.timeout):
            raise _Retryable(f"timed out after {self.timeout_s} s") from None
        except (ConnectionError, HTTPException, OSError) as error:
            raise _Retryable(f"connection error: {type(error).__name__}: {error}") from None
        try:
            return json.loads(raw)
        except ValueError:
            raise _Retryable(f"answer is not JSON: {raw[:200]!r}") from None


def _retry_after(headers) -> float | None:
    try:
        return float(headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None
