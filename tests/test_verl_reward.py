"""verl's reward function against a live evaluation service on 127.0.0.1: a small HTTP server written
here, speaking the service's contract (POST /v1/evaluate, bearer token, {"result": EvalResult}) and
running drk.evaluate(device="cpu") on what it is sent. A correct, a wrong and a hacked candidate of a
built-in task are evaluated for real; a reply without code costs no request; a bad token is not retried;
a busy service (503) is retried; a service that is not there fails after the retries."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("httpx")

import drk_lab as drk  # noqa: E402
from drk_lab.agent.rewards import get_reward  # noqa: E402
from drk_lab.harness.task import DATA_DIR, task_from_source  # noqa: E402
from drk_lab.integrations.verl_reward import ServiceError, compute_score, evaluate_remote  # noqa: E402

TOKEN = "s3cret"
OPTIONS = {"correctness_trials": 2}


class Service:
    """The contract of `drk serve`, in a few lines: enough to test the client end to end."""

    def __init__(self, busy_first: int = 0):
        self.requests: list[dict] = []
        self.busy_first = busy_first
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def answer(self, status: int, payload: dict) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.requests.append(body)
                if self.path != "/v1/evaluate":
                    return self.answer(404, {"error": "not_found", "detail": self.path})
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self.answer(401, {"error": "unauthorized", "detail": "bad or missing token"})
                if len(service.requests) <= service.busy_first:
                    return self.answer(503, {"error": "busy", "detail": "try again"})
                task = task_from_source(body["task_source"], "posted")
                result = drk.evaluate(task, body["code"], device="cpu", **body["options"])
                return self.answer(200, {"result": result.to_dict()})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    s = Service()
    yield s
    s.close()


@pytest.fixture(scope="module")
def relu():
    task = next(t for t in drk.builtin_tasks(level=1) if t.name == "01_relu").small()
    return {"task": task.source, "correct": drk.builtin_solution(task),
            "wrong": (DATA_DIR / "variants" / "wrong_value.py").read_text(),
            "hacked": (DATA_DIR / "hacks" / "lazy_output__proxy.py").read_text()}


def reply(code: str) -> str:
    return f"Here is a faster kernel.\n\n```python\n{code}```\n"


def test_correct_wrong_and_hacked_candidates_through_the_service(service, relu):
    scores = {}
    for name in ("correct", "wrong", "hacked"):
        scores[name] = compute_score("drk_lab", reply(relu[name]), relu["task"], {"task_name": "01_relu"},
                                     url=service.url, token=TOKEN, options=OPTIONS)
    assert len(service.requests) == 3
    assert service.requests[0]["code"] == relu["correct"] and service.requests[0]["options"] == OPTIONS
    correct, wrong, hacked = scores["correct"], scores["wrong"], scores["hacked"]
    # on the CPU nothing is timed: drkernel gives 0.5 for correct (speed and coverage terms 0)
    assert correct["correct"] == 1.0 and correct["score"] == pytest.approx(0.5) and correct["error_kind"] == ""
    assert correct["speedup"] is None and correct["evaluated"] == 1.0  # untimed on the CPU: None, not NaN
    assert wrong["correct"] == 0.0 and wrong["error_kind"] == "mismatch" and wrong["score"] == 0.0
    assert hacked["hacked"] == 1.0 and hacked["error_kind"] == "hacked" and hacked["score"] == 0.0
    assert all(set(s) == set(correct) for s in scores.values())  # verl stacks the keys into columns


def test_the_reward_is_drk_labs_reward_of_the_services_result(service, relu):
    res = evaluate_remote(relu["task"], relu["wrong"], OPTIONS, url=service.url, token=TOKEN)
    assert isinstance(res, drk.EvalResult) and res.error_kind == "mismatch"
    tiered = compute_score("drk_lab", reply(relu["wrong"]), relu["task"], url=service.url, token=TOKEN,
                           reward="tiered", options=OPTIONS)
    assert tiered["score"] == get_reward("tiered")(res) == -0.25


def test_a_reply_without_code_costs_no_request(service, relu):
    score = compute_score("drk_lab", "I would use a Triton kernel here.", relu["task"], url=service.url, token=TOKEN)
    assert score["evaluated"] == 0.0 and score["error_kind"] == "no_code" and score["score"] == 0.0
    assert service.requests == []


def test_url_and_token_from_the_environment(service, relu, monkeypatch):
    monkeypatch.setenv("DRK_SERVICE_URL", service.url)
    monkeypatch.setenv("DRK_SERVICE_TOKEN", TOKEN)
    assert compute_score("drk_lab", reply(relu["correct"]), relu["task"], options=OPTIONS)["correct"] == 1.0
    monkeypatch.delenv("DRK_SERVICE_URL")
    with pytest.raises(ValueError, match="DRK_SERVICE_URL"):
        compute_score("drk_lab", reply(relu["correct"]), relu["task"])


def test_a_bad_token_is_not_retried(service, relu):
    with pytest.raises(ServiceError, match="HTTP 401: unauthorized") as err:
        evaluate_remote(relu["task"], relu["correct"], url=service.url, token="wrong", retries=3, backoff_s=0.01)
    assert not err.value.retryable and len(service.requests) == 1


def test_a_busy_service_is_retried(relu):
    busy = Service(busy_first=2)
    try:
        res = evaluate_remote(relu["task"], relu["correct"], OPTIONS, url=busy.url, token=TOKEN, retries=2,
                              backoff_s=0.01)
        assert res.correct and len(busy.requests) == 3
    finally:
        busy.close()


def test_no_service_fails_after_the_retries(relu):
    gone = Service()
    url = gone.url
    gone.close()  # nothing listens on that port any more
    with pytest.raises(ServiceError, match="ConnectError") as err:
        evaluate_remote(relu["task"], relu["correct"], url=url, token=TOKEN, retries=2, backoff_s=0.01)
    assert err.value.retryable
