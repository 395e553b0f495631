"""`drk serve`: the HTTP service on uvicorn, with its pool and store, in one command.

    drk serve                                        # 127.0.0.1:8471, local pool, store drk_service.sqlite
    DRK_SERVICE_TOKEN=... drk serve --host 0.0.0.0 --pool ray --workers 4

The token rule: a service that listens anywhere but the loopback (127.0.0.1, ::1, localhost) needs a
bearer token, from $DRK_SERVICE_TOKEN or --token-file (never a command-line argument, which `ps`
shows); without one it refuses to start. On the loopback a token is optional, and required when given.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = ("127.0.0.1", "::1", "localhost")
DEFAULT_PORT = 8471


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    store: str = "drk_service.sqlite"  # the SQLite file of results and jobs
    pool: str = "local"  # "local": this machine's worker pool; "ray": one actor per GPU (or --workers on a CPU)
    workers: int | None = None  # ray: actors (default: one per GPU of the cluster, or 2 on the CPU)
    slots: int | None = None  # evaluations at once per actor (ray, default 2) or in the local pool (default: cores)
    device: str = "auto"
    task_dirs: tuple[str, ...] = ()  # folders whose files may be named as tasks (the built-in suite always may)
    ray_address: str | None = None  # an existing Ray cluster ("auto" or host:port); none: a local one
    named_tasks_only: bool = False  # refuse task_source in requests (only tasks from the task folders)
    token: str | None = field(default=None, repr=False)


def read_token(token_file: str | None) -> str | None:
    if token_file:
        path = Path(token_file)
        if not path.is_file():
            raise ValueError(f"--token-file {token_file}: no such file")
        token = path.read_text().strip()
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty")
        return token
    return os.environ.get("DRK_SERVICE_TOKEN") or None


def check_listen(host: str, token: str | None) -> None:
    """The token rule, in one line: ValueError when the service would listen beyond the loopback without one."""
    if host not in LOOPBACK and not token:
        raise ValueError(f"--host {host} listens beyond 127.0.0.1: set a bearer token in $DRK_SERVICE_TOKEN "
                         "or --token-file")
    if token is not None and len(token) < 16:
        raise ValueError("the bearer token must be at least 16 characters")


def make_pool(settings: ServeSettings):
    if settings.pool == "ray":
        from drk_lab.service.ray_pool import RayPool

        return RayPool(actors=settings.workers, device=settings.device, slots=settings.slots or 2,
                       address=settings.ray_address)
    if settings.pool != "local":
        raise ValueError(f"--pool {settings.pool!r}: expected 'local' or 'ray'")
    from drk_lab.service.jobs import LocalPool

    return LocalPool(settings.device, settings.slots)


def build_app(settings: ServeSettings):
    """The app, its pool and store, ready for uvicorn (tests and serve() both use this)."""
    from drk_lab.service.api import create_app
    from drk_lab.service.jobs import JobRunner
    from drk_lab.service.store import Store

    check_listen(settings.host, settings.token)
    for folder in settings.task_dirs:
        if not Path(folder).is_dir():
            raise ValueError(f"--task-dir {folder}: no such folder")
    runner = JobRunner(make_pool(settings), Store(settings.store))
    return create_app(runner, settings.token, list(settings.task_dirs), not settings.named_tasks_only), runner


def serve(settings: ServeSettings) -> None:
    import logging

    import uvicorn

    app, runner = build_app(settings)
    logging.getLogger("drk_lab.service").info("store %s, %d worker(s)", settings.store, len(runner.pool.workers()))
    print(f"drk serve: http://{settings.host}:{settings.port} ({settings.pool} pool on {runner.pool.device_name}, "
          f"{runner.pool.capacity} evaluations at once; store {settings.store})", flush=True)
    try:
        uvicorn.run(app, host=settings.host, port=settings.port, log_level="warning", timeout_graceful_shutdown=5)
    finally:
        runner.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="beyond 127.0.0.1 a token is required")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--store", default="drk_service.sqlite", help="SQLite file of results and jobs")
    parser.add_argument("--pool", default="local", choices=["local", "ray"],
                        help="local: this machine's worker pool; ray: one actor per GPU")
    parser.add_argument("--workers", type=int, default=None, help="ray: actors (default one per GPU, 2 on a CPU)")
    parser.add_argument("--slots", type=int, default=None, help="evaluations at once per actor / in the local pool")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--task-dir", action="append", default=[], help="a folder whose task files may be named")
    parser.add_argument("--ray-address", default=None, help="an existing Ray cluster: auto or HOST:PORT")
    parser.add_argument("--named-tasks-only", action="store_true", help="refuse task sources sent in requests")
    parser.add_argument("--token-file", default=None, help="file holding the bearer token (else $DRK_SERVICE_TOKEN)")


def settings_from_args(args) -> ServeSettings:
    return ServeSettings(host=args.host, port=args.port, store=args.store, pool=args.pool, workers=args.workers,
                         slots=args.slots, device=args.device, task_dirs=tuple(args.task_dir),
                         ray_address=args.ray_address, named_tasks_only=args.named_tasks_only,
                         token=read_token(args.token_file))
