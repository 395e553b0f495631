"""The evaluation service on a real uvicorn server on 127.0.0.1 (a `drk serve` subprocess, local pool, a real
SQLite file): the same EvalResult as a local call, repeats answered from the store, every bad request with
its status and a JSON body, the token rule, and a restart that keeps every finished result and job."""

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
import httpx  # noqa: E402

import drk_lab as drk  # noqa: E402
from drk_lab.service.client import ServiceClient, ServiceError  # noqa: E402

pytestmark = pytest.mark.slow  # real servers and hundreds of requests

TOKEN = "test-token-0123456789abcdef"
VOLATILE = {"worker_pid", "worker_job", "eval_seconds", "stage_seconds", "trial_seconds", "stdout"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(store, port, *extra, token=TOKEN):
    env = {**os.environ, "DRK_SERVICE_TOKEN": token} if token else dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-m", "drk_lab.cli", "serve", "--port", str(port), "--store", str(store),
                             "--device", "cpu", "--slots", "2", *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited: {proc.stdout.read()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("the server did not come up")


def stop(proc, sig=signal.SIGTERM):
    os.killpg(proc.pid, sig)  # the server and its worker pool
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    tasks = folder / "tasks"
    tasks.mkdir()
    (tasks / "my_relu.py").write_text(drk.builtin_tasks(level=1)[0].source)
    (folder / "secret.py").write_text(drk.builtin_tasks(level=1)[0].source)  # a task file outside the task folder
    port = free_port()
    proc = start_server(folder / "store.sqlite", port, "--task-dir", str(tasks))
    yield {"url": f"http://127.0.0.1:{port}", "folder": folder, "proc": proc}
    stop(proc)


@pytest.fixture(scope="module")
def client(server):
    c = ServiceClient(server["url"], token=TOKEN, timeout_s=120)
    yield c
    c.close()


def test_the_service_gives_the_same_result_as_the_local_call(server, client, relu_small, relu_solution, monkeypatch):
    local = drk.evaluate(relu_small, relu_solution, device="cpu", seed=7)
    monkeypatch.setenv("DRK_SERVICE_TOKEN", TOKEN)
    remote = drk.evaluate(relu_small, relu_solution, backend=server["url"], seed=7)
    assert type(remote) is drk.EvalResult and remote.correct
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k not in VOLATILE}  # noqa: E731
    assert strip(remote) == strip(local)  # seeds, verdict, notes (the size note too), versions
    wrong = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, x, 0.5)")
    assert wrong != relu_solution
    assert client.evaluate(relu_small, wrong, seed=7).error_kind == "mismatch"


def test_a_repeated_request_is_answered_from_the_store(client, relu_small, relu_solution):
    body = {**client.body(relu_small, relu_solution, {"seed": 11, "correctness_trials": 2}), "wait_s": 60}
    first = client.request("POST", "/v1/evaluate", json=body)
    before = client.health()["evaluations"]
    again = client.request("POST", "/v1/evaluate", json=body)
    assert first["state"] == again["state"] == "done" and not first["cached"] and again["cached"]
    assert client.health()["evaluations"] == before  # no new evaluation
    assert again["result"] == first["result"]
    assert client.request("GET", f"/v1/jobs/{first['job_id']}/result") == first["result"]


def test_a_cheat_is_caught_through_the_service_as_in_the_local_call(client):
    """The other-shape check needs the task's SMALL_SIZES: a job rebuilt from its source without them only
    changed the batch size, and a kernel that bakes in the row widths passed through the service."""
    baked = (Path(drk.__file__).parents[1] / "data/hacks/shape_specialized__baked_sizes.py").read_text()
    for task in ("level1/08_softmax", [t for t in drk.builtin_tasks(level=1) if t.name == "08_softmax"][0].small()):
        r = client.evaluate(task, baked, seed=0, correctness_trials=3, timing=False, profile=False)
        assert r.hacked and r.hack_reasons == ["shape_specialized"], (task if isinstance(task, str) else "source", r.error)


def test_named_tasks_batch_and_workers(server, client, relu_solution):
    jobs = client.request("POST", "/v1/batch", json={"requests": [
        {"task": "level1/01_relu", "code": relu_solution, "options": {"seed": 1}},
        {"task": "my_relu.py", "code": relu_solution, "options": {"seed": 1}}]})["jobs"]
    results = [client.wait(job["job_id"], timeout_s=120) for job in jobs]
    assert all(r.correct for r in results)
    assert "SMALL_SIZES" in results[0].notes[0]  # a CPU service runs named tasks at their small sizes
    assert jobs[1]["cached"] or client.request("GET", f"/v1/jobs/{jobs[1]['job_id']}")["state"] == "done"
    workers = client.workers()
    assert workers and workers[0]["device"] == "cpu" and workers[0]["slots"] == 2


def test_hundreds_of_concurrent_requests_are_each_answered_with_their_result(server, client, relu_small,
                                                                            relu_solution):
    """300 requests at once, each with a task source of its own: the server parses them in its request loop
    while its job threads parse theirs and run the static checks (CPython 3.11's AST construction is not
    thread-safe, gh-106905: this once answered 500). Named tasks, static verdicts and a few real evaluations
    are mixed in; every request gets 200 and its own result, and no job is left unfinished."""
    padding = "\n".join(f"def unused_{k}(a, b):\n    return [(a + b * {k}) // (a - b or 1) for _ in range(a) if a > b]"
                        for k in range(150))  # a large tree: long enough for two parses to overlap
    cheat = "import subprocess\n" + relu_solution
    cases = []
    for i in range(300):
        source = {"task_source": f"{relu_small.source}\n{padding}\nREQUEST = {i}\n", "task_name": f"relu_{i}"}
        if i % 50 == 7:
            cases.append(({**source, "code": f"# {i}\n{relu_solution}"}, None))
        elif i % 3 == 0:
            cases.append(({**source, "code": f"# {i}\nclass ModelNew:\n    pass\n"}, "no_triton_kernel"))
        elif i % 3 == 1:
            cases.append(({**source, "code": f"# {i}\n{cheat}"}, "hacked"))
        else:
            cases.append(({"task": "level1/01_relu", "code": f"# {i}\ndef broken(:\n"}, "syntax"))
    local, opened = threading.local(), []

    def send(case):
        if not hasattr(local, "http"):  # a client per thread: httpx's shared pool can close a busy connection
            local.http = httpx.Client(base_url=server["url"], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=300)
            opened.append(local.http)
        return local.http.post("/v1/evaluate", json={**case[0], "options": {"seed": 0, "timing": False},
                                                     "wait_s": 240})

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(48) as threads:
        answers = list(threads.map(send, cases))
    for http in opened:
        http.close()
    assert [a.status_code for a in answers] == [200] * len(cases), {a.status_code: a.text[:200] for a in answers}
    for (_, expected), answer in zip(cases, answers):
        result = answer.json()["result"]
        assert answer.json()["state"] == "done" and result, answer.text[:300]
        assert (result["correct"] if expected is None else result["error_kind"] == expected), (expected, result["error"])
    assert len({a.json()["job_id"] for a in answers}) == len(cases)
    assert set(client.health()["jobs"]) == {"done"}


def raw(server, method, path, token=TOKEN, **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, server["url"] + path, headers={**headers, **kwargs.pop("headers", {})},
                         timeout=60, **kwargs)


@pytest.mark.parametrize("case, status, words", [
    ("malformed_json", 400, "malformed JSON"),
    ("oversized_code", 413, "code is longer than its limit"),
    ("unknown_task", 404, "unknown task"),
    ("missing_token", 401, "missing bearer token"),
    ("wrong_token", 403, "wrong bearer token"),
    ("path_outside", 403, "outside the task folders"),
    ("absolute_outside", 403, "outside the task folders"),
    ("unknown_option", 422, "unknown field(s): options.flush_everything"),
    ("bad_value", 422, "correctness_trials"),
    ("task_and_source", 422, "exactly one of"),
    ("unknown_job", 404, "unknown job"),
    ("unknown_route", 404, "Not Found"),
    ("wrong_method", 405, "Method Not Allowed"),
])
def test_bad_requests_get_their_status_and_a_json_error(server, relu_solution, case, status, words):
    good = {"task": "01_relu", "code": relu_solution}
    send = {
        "malformed_json": lambda: raw(server, "POST", "/v1/evaluate", content=b'{"task": "01_relu", "code": ',
                                      headers={"content-type": "application/json"}),
        "oversized_code": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "code": "#" * (300 * 1024)}),
        "unknown_task": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "task": "level1/99_nothing"}),
        "missing_token": lambda: raw(server, "POST", "/v1/evaluate", token=None, json=good),
        "wrong_token": lambda: raw(server, "POST", "/v1/evaluate", token="not-the-token-at-all", json=good),
        "path_outside": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "task": "../secret.py"}),
        "absolute_outside": lambda: raw(server, "POST", "/v1/evaluate",
                                        json={**good, "task": str(server["folder"] / "secret.py")}),
        "unknown_option": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "options": {"flush_everything": 1}}),
        "bad_value": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "options": {"correctness_trials": 0}}),
        "task_and_source": lambda: raw(server, "POST", "/v1/evaluate", json={**good, "task_source": "x"}),
        "unknown_job": lambda: raw(server, "GET", "/v1/jobs/no-such-job"),
        "unknown_route": lambda: raw(server, "GET", "/v1/nothing-here"),
        "wrong_method": lambda: raw(server, "DELETE", "/v1/evaluate"),
    }[case]
    response = send()
    assert response.status_code == status, response.text
    body = response.json()
    assert words in body["error"] and "Traceback" not in response.text


def test_the_client_raises_on_a_4xx_and_retries_a_dead_address(server, relu_small):
    bad = ServiceClient(server["url"], token="wrong-token-0123456789")
    with pytest.raises(ServiceError) as e:
        bad.evaluate(relu_small, "x")
    assert e.value.status == 403
    gone = ServiceClient(f"http://127.0.0.1:{free_port()}", retries=2, backoff_s=0.05)
    started = time.monotonic()
    with pytest.raises(ServiceError, match="gave up after 3 attempts"):
        gone.health()
    assert time.monotonic() - started >= 0.15  # 0.05 + 0.1 of back-off


def test_a_server_fault_is_a_json_500_without_a_traceback(tmp_path):
    """A real fault inside a route (the store's database closed under it) on an in-process uvicorn server: a JSON 500,
    and the client's connection stays usable."""
    import uvicorn

    from drk_lab.service.server import ServeSettings, build_app

    app, runner = build_app(ServeSettings(store=str(tmp_path / "s.sqlite"), device="cpu", slots=1))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        runner.store.close()
        response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert response.status_code == 500
        assert "internal server error (ProgrammingError)" in response.json()["error"]
        assert "Traceback" not in response.text and "sqlite" not in response.text.lower()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(2):  # the connection stays open (a fault that left the app made uvicorn close it)
            connection.request("GET", "/health")
            answer = connection.getresponse()
            assert answer.status == 500 and b"ProgrammingError" in answer.read()
        connection.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_beyond_the_loopback_a_token_is_required(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DRK_SERVICE_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "drk_lab.cli", "serve", "--host", "0.0.0.0", "--store",
                          str(tmp_path / "s.sqlite")], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "listens beyond 127.0.0.1: set a bearer token" in out.stderr
    short = subprocess.run([sys.executable, "-m", "drk_lab.cli", "serve", "--token-file", str(tmp_path / "none")],
                           capture_output=True, text=True, timeout=60)
    assert short.returncode == 2 and "--token-file" in short.stderr and "no such file" in short.stderr


SLOW = """
import time
import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()
        time.sleep(4)

    def forward(self, x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
"""


def test_a_restart_keeps_finished_results_and_resumes_unfinished_jobs(tmp_path, relu_small, relu_solution):
    store, port = tmp_path / "store.sqlite", free_port()
    url = f"http://127.0.0.1:{port}"
    first = start_server(store, port)
    c = ServiceClient(url, token=TOKEN, timeout_s=120)
    done = c.request("POST", "/v1/evaluate", json={**c.body(relu_small, relu_solution, {"seed": 5}), "wait_s": 120})
    assert done["state"] == "done"
    slow_job = c.submit(relu_small, SLOW, seed=5, hack_checks=False)  # still running when the server dies
    time.sleep(1.0)
    stop(first, signal.SIGKILL)
    second = start_server(store, port)
    try:
        kept = c.request("GET", f"/v1/jobs/{done['job_id']}")
        assert kept["state"] == "done" and kept["result"] == done["result"]
        resumed = c.wait(slow_job, timeout_s=120)
        assert resumed.correct
        again = c.request("POST", "/v1/evaluate", json={**c.body(relu_small, relu_solution, {"seed": 5}), "wait_s": 0})
        assert again["cached"] and again["result"] == done["result"]
        assert c.health()["evaluations"] == 1  # only the resumed job ran on the second server
    finally:
        c.close()
        stop(second)
    rows = json.loads(subprocess.run([sys.executable, "-c", (
        "import json, sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
        "print(json.dumps(db.execute('SELECT state, COUNT(*) FROM jobs GROUP BY state').fetchall()))"), str(store)],
        capture_output=True, text=True, check=True).stdout)
    assert rows == [["done", 3]]
