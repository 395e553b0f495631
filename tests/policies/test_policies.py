"""The token-level policies with a real (tiny, random) transformer: TransformersPolicy directly, and
OpenAIPolicy against an OpenAI-compatible HTTP server on 127.0.0.1 that answers with the same model."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import torch  # noqa: E402

from drk_lab.policies.huggingface import TransformersPolicy  # noqa: E402
from drk_lab.policies.openai_compat import OpenAIPolicy, OpenAIPolicyError  # noqa: E402
from drk_lab.rl.tiny_model import load_tiny, make_tiny_model  # noqa: E402

CONVERSATIONS = [
    [{"role": "user", "content": "Write a relu kernel"}],
    [
        {"role": "system", "content": "You are an expert in writing fast, correct Triton kernels."},
        {"role": "user", "content": "The output does not match the reference. Fix the kernel and return the full code."},
    ],
]


@pytest.fixture(scope="module")
def tiny(tiny_path):
    return load_tiny(tiny_path)


@pytest.fixture(scope="module")
def policy(tiny):
    model, tokenizer = tiny
    return TransformersPolicy(model, tokenizer, device="cpu", max_new_tokens=8, batch_size=3)


def forward_logprobs(model, completion, temperature=1.0, top_k=0):
    """Per generated token: log-probability from one teacher-forced pass over prompt + completion, and
    whether each token lies within the top_k of the raw logits."""
    prompt = completion.extra["prompt_token_ids"]
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    scores = logits / temperature
    if top_k:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    targets = torch.tensor(completion.token_ids)[:, None]
    return torch.log_softmax(scores, -1).gather(-1, targets).squeeze(-1)


def test_tiny_model_is_reproducible_and_idempotent(tmp_path):
    first = make_tiny_model(tmp_path / "a", seed=3)
    weights = first / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert make_tiny_model(tmp_path / "a", seed=3) == first and weights.stat().st_mtime_ns == stamp
    second = make_tiny_model(tmp_path / "b", seed=3)
    assert (second / "model.safetensors").read_bytes() == weights.read_bytes()
    assert (second / "tokenizer.json").read_text() == (first / "tokenizer.json").read_text()
    other = make_tiny_model(tmp_path / "c", seed=4)
    assert (other / "model.safetensors").read_bytes() != weights.read_bytes()


def test_tokenizer_chat_template(tiny):
    _, tokenizer = tiny
    text = tokenizer.apply_chat_template(CONVERSATIONS[0], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nWrite a relu kernel<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and tokenizer.decode(ids) == text
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    code = "tl.store(out_ptr + offsets, ü, mask=mask)  # ünïcode"
    assert tokenizer.decode(tokenizer(code)["input_ids"]) == code


def test_transformers_policy_samples_with_model_logprobs(tiny, policy):
    model, _ = tiny
    out = policy.generate(CONVERSATIONS, n=2, temperature=1.0, seed=0)
    assert [len(group) for group in out] == [2, 2]
    stops = set(policy.stop_token_ids)
    for group in out:
        for c in group:
            assert len(c.logprobs) == len(c.token_ids) == len(c.extra["sampling_logprobs"]) >= 1
            if c.finish_reason == "length":
                assert len(c.token_ids) == 8 and not stops & set(c.token_ids)
            else:
                assert c.token_ids[-1] in stops
            expected = forward_logprobs(model, c)
            assert torch.allclose(torch.tensor(c.logprobs), expected, atol=1e-4)
            assert c.extra["sampling_logprobs"] == pytest.approx(c.logprobs, abs=1e-6)  # temperature 1, no cut
    assert any(c.finish_reason == "length" for group in out for c in group)
    assert out[0][0].extra["prompt_token_ids"] != out[1][0].extra["prompt_token_ids"]
    again = policy.generate(CONVERSATIONS, n=2, temperature=1.0, seed=0)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in out]


def test_transformers_policy_sampling_logprobs_follow_temperature_and_top_k(tiny, policy):
    model, _ = tiny
    (completion,), _ = policy.generate(CONVERSATIONS, n=1, temperature=0.5, top_k=5, seed=1)
    in_top5 = forward_logprobs(model, completion, temperature=0.5, top_k=5)
    assert torch.isfinite(in_top5).all()  # every sampled token was among the 5 most likely
    assert torch.allclose(torch.tensor(completion.extra["sampling_logprobs"]), in_top5, atol=1e-4)
    assert torch.allclose(torch.tensor(completion.logprobs), forward_logprobs(model, completion), atol=1e-4)


def test_transformers_policy_left_padding_and_stop_token(tiny, policy):
    model, tokenizer = tiny
    model.train()  # generation switches to eval mode and back, as a trainer sharing the model expects
    batched = policy.generate(CONVERSATIONS, n=1, temperature=0)
    assert model.training
    model.eval()
    for conversation, (together,) in zip(CONVERSATIONS, batched):
        ((alone,),) = policy.generate([conversation], n=1, temperature=0)
        assert together.token_ids == alone.token_ids
    greedy = batched[1][0].token_ids
    stop = greedy[2]
    stopping = TransformersPolicy(model, tokenizer, device="cpu", max_new_tokens=8, stop_token_ids=[stop])
    ((c,),) = stopping.generate(CONVERSATIONS[1:], n=1, temperature=0)
    cut = greedy.index(stop) + 1
    assert c.finish_reason == "stop" and c.token_ids == greedy[:cut] and len(c.logprobs) == cut
    assert c.text == tokenizer.decode(greedy[: cut - 1], skip_special_tokens=True)
    with pytest.raises(ValueError, match="temprature"):
        policy.generate(CONVERSATIONS, temprature=1.0)


class ChatServer:
    """An OpenAI-compatible /v1/chat/completions endpoint answering with a TransformersPolicy. Knobs set
    by the tests: fail_first (answer that many requests with 500), fail_status (answer every request
    with it), sleep_s (wait before answering), max_choices (return at most that many choices)."""

    def __init__(self, policy):
        self.policy = policy
        self.fail_first, self.fail_status, self.sleep_s, self.max_choices = 0, None, 0.0, None
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        self.lock, self.model_lock = threading.Lock(), threading.Lock()
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append((self.path, dict(self.headers), body))
                    count = len(server.requests)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                self.counted = True
                try:
                    if server.closing.wait(server.sleep_s):
                        return  # the test is over: no model work in a thread that outlives it
                    if server.fail_status is not None or count <= server.fail_first:
                        self.reply(server.fail_status or 500, {"error": {"message": "planted failure"}})
                    else:
                        self.reply(200, server.answer(body))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting
                finally:
                    self.uncount()

            def uncount(self):
                # before the answer goes out: once the client has it, it may send the next request at once
                if self.counted:
                    self.counted = False
                    with server.lock:
                        server.in_flight -= 1

            def reply(self, status, payload):
                self.uncount()
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False  # so that close() joins the handler threads
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, body):
        n = body.get("n", 1)
        sampling = {k: body[k] for k in ("temperature", "top_p", "seed") if k in body}
        with self.model_lock:
            (completions,) = self.policy.generate(
                [body["messages"]], n=n, max_new_tokens=body.get("max_tokens", 8), **sampling
            )
        decode = self.policy.tokenizer.decode
        choices = []
        for index, c in enumerate(completions[: self.max_choices or n]):
            choice = {
                "index": index,
                "message": {"role": "assistant", "content": c.text},
                "finish_reason": c.finish_reason,
                "token_ids": c.token_ids,
            }
            if body.get("logprobs"):
                content = [{"token": decode([t]), "logprob": lp} for t, lp in zip(c.token_ids, c.logprobs)]
                choice["logprobs"] = {"content": content}
            choices.append(choice)
        return {"id": "chatcmpl-test", "object": "chat.completion", "model": body["model"], "choices": choices}


@pytest.fixture
def server(policy):
    chat = ChatServer(policy)
    yield chat
    chat.close()


def test_openai_policy_against_local_server(server, policy, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)  # no path: "/v1" is added
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    client = OpenAIPolicy("tiny", backoff_s=0.01)
    out = client.generate(CONVERSATIONS, n=2, temperature=0, max_new_tokens=6)
    assert [len(group) for group in out] == [2, 2]
    assert len(server.requests) == 2
    for path, headers, body in server.requests:
        assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer test-key"
        assert body["n"] == 2 and body["logprobs"] is True and body["max_tokens"] == 6
    for conversation, group in zip(CONVERSATIONS, out):
        ((direct,),) = policy.generate([conversation], n=1, temperature=0, max_new_tokens=6)
        for c in group:
            assert c.text == direct.text and c.token_ids == direct.token_ids
            assert c.logprobs == pytest.approx(direct.logprobs, abs=1e-4)
            assert c.finish_reason == direct.finish_reason and len(c.extra["tokens"]) == len(c.logprobs)


def test_openai_policy_asks_again_when_server_returns_fewer_choices(server):
    server.max_choices = 1
    out = OpenAIPolicy("tiny", base_url=server.base_url + "/v1", backoff_s=0.01).generate(
        CONVERSATIONS[:1], n=3, temperature=1.0, max_new_tokens=4
    )
    assert len(out[0]) == 3 and all(c.logprobs and len(c.logprobs) == len(c.token_ids) for c in out[0])
    assert [body.get("n", 1) for _, _, body in server.requests] == [3, 1, 1]


def test_openai_policy_retries_a_server_error(server):
    server.fail_first = 1
    client = OpenAIPolicy("tiny", base_url=server.base_url, max_retries=2, backoff_s=0.01)
    ((c,),) = client.generate(CONVERSATIONS[:1], n=1, temperature=0, max_new_tokens=4)
    assert len(server.requests) == 2 and len(c.token_ids) == len(c.logprobs) >= 1


def test_openai_policy_gives_up_after_max_retries(server):
    server.fail_status = 503
    client = OpenAIPolicy("tiny", base_url=server.base_url, max_retries=2, backoff_s=0.01)
    with pytest.raises(OpenAIPolicyError, match="after 3 attempt.*HTTP 503.*planted failure") as error:
        client.generate(CONVERSATIONS[:1], n=1, max_new_tokens=4)
    assert error.value.status == 503 and error.value.attempts == 3 and len(server.requests) == 3


def test_openai_policy_does_not_retry_a_client_error(server):
    server.fail_status = 400
    client = OpenAIPolicy("tiny", base_url=server.base_url, max_retries=3, backoff_s=0.01)
    with pytest.raises(OpenAIPolicyError, match="HTTP 400") as error:
        client.generate(CONVERSATIONS[:1], n=1, max_new_tokens=4)
    assert error.value.attempts == 1 and len(server.requests) == 1


def test_openai_policy_times_out(server):
    server.sleep_s = 2.0
    client = OpenAIPolicy("tiny", base_url=server.base_url, timeout_s=0.3, max_retries=1, backoff_s=0.01)
    start = time.monotonic()
    with pytest.raises(OpenAIPolicyError, match="timed out after 0.3 s"):
        client.generate(CONVERSATIONS[:1], n=1, max_new_tokens=4)
    assert time.monotonic() - start < 1.5 and len(server.requests) == 2


def test_openai_policy_limits_concurrency(server):
    server.sleep_s = 0.2
    client = OpenAIPolicy("tiny", base_url=server.base_url, max_concurrency=2, backoff_s=0.01)
    out = client.generate(CONVERSATIONS * 3, n=1, temperature=0, max_new_tokens=2)
    assert len(out) == 6 and len(server.requests) == 6
    assert 1 <= server.max_in_flight <= 2, server.max_in_flight  # 2 when the requests overlap (a loaded machine may prevent it)


def test_openai_policy_connection_refused():
    import socket

    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIPolicy("tiny", base_url=f"http://127.0.0.1:{port}", max_retries=1, backoff_s=0.01)
    with pytest.raises(OpenAIPolicyError, match="connection error"):
        client.generate(CONVERSATIONS[:1], n=1)


def test_episode_with_the_tiny_transformer_records_tokens_and_classifies_its_replies(tiny, tasks, tmp_path):
    from drk_lab.agent.episodes import run_episode
    from drk_lab.agent.feedback import count_tokens
    from drk_lab.agent.trajectory import read_jsonl

    model, tokenizer = tiny
    policy = TransformersPolicy(model, tokenizer, device="cpu", max_new_tokens=12)
    task = tasks["level1/01_relu"].small()
    traj = run_episode(task, policy, max_turns=2, tokenizer=tokenizer, sampling={"temperature": 1.0, "seed": 0},
                       jsonl_path=tmp_path / "tiny.jsonl", device="cpu", correctness_trials=1)
    assert len(traj.turns) == 2
    for turn in traj.turns:
        assert turn.finish_reason in ("stop", "length") and turn.token_ids and len(turn.logprobs) == len(turn.token_ids)
        assert turn.code is None and turn.result.error_kind == "no_code"  # 12 random tokens hold no code block
        assert turn.reward == 0.0 and "NOT EVALUATED" in turn.feedback
    assert traj.turns[0].prompt_tokens == count_tokens(traj.prompt, tokenizer)
    assert traj.turns[1].prompt_tokens > traj.turns[0].prompt_tokens  # the first reply and its feedback joined
    assert read_jsonl(tmp_path / "tiny.jsonl")[0].turns[1].token_ids == traj.turns[1].token_ids
