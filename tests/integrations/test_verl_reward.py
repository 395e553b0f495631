"""verl's reward function against the real evaluation service: a `drk serve` subprocess on 127.0.0.1
(local pool on the CPU, a real SQLite store, a bearer token). A correct, a wrong and a hacked candidate of a
built-in task are evaluated for real and scored as drk_lab's reward scores them; a reply without code
sends no request; a wrong token and a malformed request raise at once (no retry); a job that does not
finish in time raises; a service that is not there fails after the retries; one client per process."""

import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

import drk_lab as drk  # noqa: E402
from drk_lab.agent.rewards import get_reward  # noqa: E402
from drk_lab.harness.task import DATA_DIR  # noqa: E402
from drk_lab.integrations.verl_reward import compute_score, evaluate_remote, service_client  # noqa: E402
from drk_lab.service.client import ServiceClient, ServiceError  # noqa: E402
from tests.service.test_service import SLOW, TOKEN, free_port, start_server, stop  # noqa: E402

OPTIONS = {"correctness_trials": 2}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    proc = start_server(tmp_path_factory.mktemp("verl_service") / "store.sqlite", port)
    url = f"http://127.0.0.1:{port}"
    watcher = ServiceClient(url, token=TOKEN)
    yield {"url": url, "jobs": lambda: sum(watcher.health()["jobs"].values())}  # jobs of every state
    watcher.close()
    stop(proc)


@pytest.fixture(scope="module")
def relu():
    task = next(t for t in drk.builtin_tasks(level=1) if t.name == "01_relu").small()
    return {"task": task.source, "correct": drk.builtin_solution(task),
            "wrong": (DATA_DIR / "variants" / "wrong_value.py").read_text(),
            "hacked": (DATA_DIR / "hacks" / "lazy_output__proxy.py").read_text()}


def reply(code: str) -> str:
    return f"Here is a faster kernel.\n\n```python\n{code}```\n"


@pytest.mark.slow
def test_correct_wrong_and_hacked_candidates_through_the_service(server, relu):
    before = server["jobs"]()
    scores = {name: compute_score("drk_lab", reply(relu[name]), relu["task"], {"task_name": "01_relu"},
                                  url=server["url"], token=TOKEN, options=OPTIONS)
              for name in ("correct", "wrong", "hacked")}
    assert server["jobs"]() == before + 3  # one job on the service per candidate
    correct, wrong, hacked = scores["correct"], scores["wrong"], scores["hacked"]
    # on the CPU nothing is timed: drkernel gives 0.5 for correct (speed and coverage terms 0)
    assert correct["correct"] == 1.0 and correct["score"] == pytest.approx(0.5) and correct["error_kind"] == ""
    assert correct["speedup"] is None and correct["evaluated"] == 1.0  # untimed on the CPU: None, not NaN
    assert wrong["correct"] == 0.0 and wrong["error_kind"] == "mismatch" and wrong["score"] == 0.0
    assert hacked["hacked"] == 1.0 and hacked["error_kind"] == "hacked" and hacked["score"] == 0.0
    assert all(set(s) == set(correct) for s in scores.values())  # verl stacks the keys into columns


def test_the_reward_is_drk_labs_reward_of_the_services_result(server, relu):
    res = evaluate_remote(relu["task"], relu["wrong"], OPTIONS, task_name="01_relu", url=server["url"], token=TOKEN)
    assert isinstance(res, drk.EvalResult) and res.error_kind == "mismatch"
    tiered = compute_score("drk_lab", reply(relu["wrong"]), relu["task"], url=server["url"], token=TOKEN,
                           reward="tiered", options=OPTIONS)
    assert tiered["score"] == get_reward("tiered")(res) == -0.25
    good = evaluate_remote(relu["task"], relu["correct"], {"correctness_trials": 3}, url=server["url"], token=TOKEN)
    assert good.correct and good.trials == 3  # the options reach the evaluator


def test_a_reply_without_code_sends_no_request(server, relu):
    before = server["jobs"]()
    score = compute_score("drk_lab", "I would use a Triton kernel here.", relu["task"], url=server["url"], token=TOKEN)
    assert score["evaluated"] == 0.0 and score["error_kind"] == "no_code" and score["score"] == 0.0
    assert server["jobs"]() == before
    nowhere = f"http://127.0.0.1:{free_port()}"  # any request there would fail
    assert compute_score("drk_lab", "no code", relu["task"], url=nowhere, retries=0)["error_kind"] == "no_code"


def test_url_and_token_from_the_environment_and_one_client_per_process(server, relu, monkeypatch):
    monkeypatch.setenv("DRK_SERVICE_URL", server["url"])
    monkeypatch.setenv("DRK_SERVICE_TOKEN", TOKEN)
    assert compute_score("drk_lab", reply(relu["correct"]), relu["task"], options=OPTIONS)["correct"] == 1.0
    assert service_client() is service_client(server["url"] + "/", TOKEN)  # made once, reused
    assert service_client(token="another-token-0123456789") is not service_client()
    monkeypatch.delenv("DRK_SERVICE_URL")
    with pytest.raises(ValueError, match="DRK_SERVICE_URL"):
        compute_score("drk_lab", reply(relu["correct"]), relu["task"])


def test_a_wrong_token_and_a_malformed_request_raise_at_once(server, relu):
    started = time.monotonic()
    with pytest.raises(ServiceError, match="wrong bearer token") as err:
        compute_score("drk_lab", reply(relu["correct"]), relu["task"], url=server["url"],
                      token="wrong-token-0123456789", retries=3, backoff_s=5.0)
    assert err.value.status == 403
    with pytest.raises(ServiceError, match="unknown field") as err:
        compute_score("drk_lab", reply(relu["correct"]), relu["task"], url=server["url"], token=TOKEN,
                      options={"flush_everything": 1}, retries=3, backoff_s=5.0)
    assert err.value.status == 422
    assert time.monotonic() - started < 5.0  # a retry would have paused 5 s first


def test_a_job_that_does_not_finish_in_time_raises(server, relu):
    with pytest.raises(ServiceError, match="still (queued|running) after 1 s"):
        compute_score("drk_lab", reply(SLOW), relu["task"], url=server["url"], token=TOKEN,
                      options={"hack_checks": False}, timeout_s=1.0)


def test_no_service_fails_after_the_retries(relu):
    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ServiceError, match="gave up after 3 attempts") as err:
        compute_score("drk_lab", reply(relu["correct"]), relu["task"], url=nowhere, token=TOKEN, retries=2,
                      backoff_s=0.05)
    assert err.value.status is None and "ConnectError" in str(err.value)
    assert time.monotonic() - started >= 0.15  # 0.05 + 0.1 of back-off between the three tries
