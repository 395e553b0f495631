"""The HTTP API (FastAPI): evaluate, batch, job status and result, health, workers.

    POST /v1/evaluate          one request; answers with the result when it is ready within `wait_s`
                               (200), else with the job's id (202) to ask about later
    POST /v1/batch             {"requests": [...]}: the jobs' ids at once (202)
    GET  /v1/jobs/{id}         the job's state (queued, running, done, failed), with its result when done;
                               `?wait_s=` waits up to that long for it to finish
    GET  /v1/jobs/{id}/result  the result only: 200, 409 while unfinished, 500 for a failed job
    GET  /v1/workers           the pool's workers (Ray actors or the local pool): device, busy slots, deaths
    GET  /health               liveness, device, counts of jobs and stored results (no token needed)

Every error is a JSON body {"error": "..."} with the status that names it: 400 malformed JSON, 401
missing token, 403 wrong token or a task path outside the task folders, 404 unknown task or job, 413 code
or task source over its size limit, 422 an unknown or invalid field, 500 a server fault (its traceback
goes to the server's log, never to the client).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Literal

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from drk_lab.common.models import harness_version
from drk_lab.harness.task import BUILTIN_DIR, Task, TaskError, load_task, task_from_source
from drk_lab.service.jobs import JobRunner

MAX_CODE_CHARS = 256 * 1024  # a candidate's source
MAX_TASK_CHARS = 256 * 1024  # a task's source
MAX_BATCH = 1000  # requests in one batch
MAX_BODY_BYTES = 64 << 20  # a whole request body
log = logging.getLogger("drk_lab.service")


class Options(BaseModel):
    """The evaluation settings a client may set (drk.evaluate's keyword arguments); others are refused."""

    model_config = ConfigDict(extra="forbid")
    timing: bool = True
    profile: bool | Literal["ncu"] = True
    correctness_trials: int = Field(5, ge=1, le=100)
    timing_trials: int = Field(100, ge=1, le=10_000)
    warmup: int = Field(3, ge=0, le=1000)
    timeout_s: float = Field(120.0, gt=0, le=3600)
    seed: int | None = None
    atol: float | None = Field(None, ge=0)
    rtol: float | None = Field(None, ge=0)
    hack_checks: bool = True
    compile_baseline: bool = True


class EvalRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str = Field(max_length=MAX_CODE_CHARS)
    task: str | None = None  # a built-in task ("01_relu", "level1/01_relu") or a file under a task folder
    task_source: str | None = Field(None, max_length=MAX_TASK_CHARS)  # or the task's source itself
    task_name: str | None = Field(None, max_length=200)  # its name, with task_source
    task_full_sizes: dict[str, int | list[int]] | None = None  # a resized task_source: the file's sizes (for its note)
    task_size_reason: str | None = Field(None, max_length=300)  # and why it was resized
    small: bool | None = None  # named tasks: their small sizes (None: on a CPU service)
    options: Options = Field(default_factory=Options)
    wait_s: float = Field(30.0, ge=0, le=600)  # /v1/evaluate: how long to wait for the result


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests: list[EvalRequest] = Field(min_length=1, max_length=MAX_BATCH)


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """422 by default; 400 for a body that is not JSON, 413 for a source over its limit."""
    problems = exc.errors()
    kinds = {p.get("type") for p in problems}
    if "json_invalid" in kinds or any(p.get("loc") == ("body",) and p.get("type") == "model_attributes_type"
                                      for p in problems):
        return error(400, "malformed JSON: the body must be one JSON object")
    if "string_too_long" in kinds:
        where = next(p for p in problems if p.get("type") == "string_too_long")
        return error(413, f"{'.'.join(map(str, where['loc'][1:]))} is longer than its limit of "
                          f"{where.get('ctx', {}).get('max_length')} characters")
    unknown = [".".join(map(str, p["loc"][1:])) for p in problems if p.get("type") == "extra_forbidden"]
    if unknown:
        return error(422, f"unknown field(s): {', '.join(unknown)}")
    described = "; ".join(f"{'.'.join(map(str, p['loc'][1:])) or 'body'}: {p.get('msg')}" for p in problems[:5])
    return error(422, f"invalid request: {described}")


@lru_cache(maxsize=1)
def builtin_index() -> dict[str, Path]:
    """Built-in task names ("01_relu" and "level1/01_relu") -> their files."""
    found = {}
    for path in sorted(BUILTIN_DIR.glob("level*/*.py")):
        found[f"{path.parent.name}/{path.stem}"] = path
        found.setdefault(path.stem, path)
    return found


@lru_cache(maxsize=512)
def load_named(path: str, mtime: float, small: bool) -> Task:
    """A task file, loaded (and made small) once per version of the file, not for every request."""
    task = load_task(path)
    return task.small() if small else task


def create_app(runner: JobRunner, token: str | None = None, task_dirs: list[str] | None = None,
               allow_task_source: bool = True) -> FastAPI:
    """The FastAPI app over a JobRunner. token: every /v1 route needs "Authorization: Bearer <token>".
    task_dirs: the folders whose files may be named as tasks (besides the built-in suite)."""
    app = FastAPI(title="drk_lab evaluation service", version=harness_version(), docs_url=None, redoc_url=None)
    roots = [Path(d).resolve() for d in (task_dirs or [])] + [BUILTIN_DIR.resolve()]

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError):
        return validation_response(exc)

    @app.exception_handler(StarletteHTTPException)  # ours, and the router's own 404 and 405
    async def on_http(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.middleware("http")
    async def limit_body_and_answer_faults(request: Request, call_next):
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return error(413, f"the request body is larger than {MAX_BODY_BYTES >> 20} MiB")
        try:
            return await call_next(request)
        except Exception as exc:  # answered here: past this point Starlette re-raises it and uvicorn drops the connection
            log.exception("error in %s %s", request.method, request.url.path)
            return error(500, f"internal server error ({type(exc).__name__}); the server's log has the details")

    def authorized(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not given:
            raise HTTPException(401, "missing bearer token (header 'Authorization: Bearer <token>')",
                                headers={"WWW-Authenticate": "Bearer"})
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise HTTPException(403, "wrong bearer token")

    def resolve_task(body: EvalRequest) -> Task:
        if (body.task is None) == (body.task_source is None):
            raise HTTPException(422, "give exactly one of 'task' (a name or a path) and 'task_source'")
        if body.task_source is not None:
            if not allow_task_source:
                raise HTTPException(403, "this service evaluates named tasks only (started with --named-tasks-only)")
            if body.small:
                raise HTTPException(422, "'small' applies to named tasks; resize a task_source before sending it")
            try:  # parsed, never run here: the source runs only where the evaluator runs it
                task = task_from_source(body.task_source, body.task_name or "task", check=False)
                return replace(task, full_sizes=body.task_full_sizes or {}, size_reason=body.task_size_reason)
            except TaskError as e:
                raise HTTPException(422, f"task_source: {e}") from None
        path = builtin_index().get(body.task.removesuffix(".py"))
        if path is None:
            candidates = [Path(body.task)] if Path(body.task).is_absolute() else [root / body.task for root in roots]
            for candidate in candidates:
                resolved = candidate.resolve()
                if not any(resolved.is_relative_to(root) for root in roots):
                    raise HTTPException(403, f"task {body.task!r}: outside the task folders this service serves")
                if resolved.is_file():
                    path = resolved
                    break
        if path is None:
            raise HTTPException(404, f"unknown task {body.task!r}: neither a built-in task nor a file in the task folders")
        small = body.small if body.small is not None else runner.pool.device_name == "cpu"
        try:
            return load_named(str(path), path.stat().st_mtime, small)
        except TaskError as e:
            raise HTTPException(422, f"task {body.task!r}: {e}") from None

    def job_request(body: EvalRequest) -> dict:
        task = resolve_task(body)
        return {"task_name": task.name, "task_source": task.source, "task_full_sizes": task.full_sizes,
                "task_size_reason": task.size_reason, "code": body.code, "options": body.options.model_dump()}

    async def waited(key: str, job_id: str, wait_s: float) -> dict:
        future = runner.future(key)
        if future is not None and wait_s > 0:
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait_s)
            except asyncio.TimeoutError:
                pass
        return runner.status(job_id)

    def answer(job: dict) -> JSONResponse:
        body = {"job_id": job["id"], "state": job["state"], "cached": job["cached"], "attempts": job["attempts"],
                "error": job["error"], "result": job.get("result")}
        return JSONResponse(body, status_code=200 if job["state"] in ("done", "failed") else 202)

    @app.get("/health")
    async def health():
        return {"status": "ok", "harness_version": harness_version(), "device": runner.pool.device_name,
                "workers": len(runner.pool.workers()), "jobs": runner.store.count_jobs(),
                "results": runner.store.count_results(), "evaluations": runner.evaluations}

    @app.get("/v1/workers", dependencies=[Depends(authorized)])
    async def workers():
        return {"workers": runner.pool.workers()}

    @app.post("/v1/evaluate", dependencies=[Depends(authorized)])
    async def evaluate(body: EvalRequest):
        submitted = runner.submit(job_request(body))
        return answer(await waited(submitted.key, submitted.job_id, body.wait_s))

    @app.post("/v1/batch", dependencies=[Depends(authorized)], status_code=202)
    async def batch(body: BatchRequest):
        requests = [job_request(one) for one in body.requests]  # all resolved before any job starts
        jobs = [runner.submit(request) for request in requests]
        return {"jobs": [{"job_id": j.job_id, "cached": j.cached} for j in jobs]}

    @app.get("/v1/jobs/{job_id}", dependencies=[Depends(authorized)])
    async def job(job_id: str, wait_s: float = 0.0):
        found = runner.status(job_id)
        if found is None:
            raise HTTPException(404, f"unknown job {job_id!r}")
        if found["state"] not in ("done", "failed") and wait_s > 0:
            found = await waited(found["key"], job_id, min(wait_s, 600.0))
        return answer(found)

    @app.get("/v1/jobs/{job_id}/result", dependencies=[Depends(authorized)])
    async def job_result(job_id: str):
        found = runner.status(job_id)
        if found is None:
            raise HTTPException(404, f"unknown job {job_id!r}")
        if found["state"] == "failed":
            raise HTTPException(500, f"job {job_id} failed: {found['error']}")
        if found["state"] != "done":
            raise HTTPException(409, f"job {job_id} is {found['state']}")
        return found["result"]

    return app
