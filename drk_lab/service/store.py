"""The result store: one SQLite file holding finished results by key, and the service's jobs.

A result's key is a hash of everything that decides it: the task's source, the candidate's code, the
evaluation settings that change the result, the device's name and the harness's version (a hash of the
harness's and hack checks' own sources, so that a changed check never answers from an old verdict). The
same request again is answered from here without an evaluation. A result is written once per key
(INSERT OR IGNORE), however many jobs asked for it. Jobs (one per request) keep their state here too, so a
restarted server still knows every job and re-runs those that had not finished.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from drk_lab.common.models import harness_version
from drk_lab.harness.result import EvalResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key TEXT PRIMARY KEY, result TEXT NOT NULL, task_name TEXT, device TEXT, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, key TEXT NOT NULL, state TEXT NOT NULL, request TEXT NOT NULL, cached INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, error TEXT, created REAL NOT NULL, finished REAL);
CREATE INDEX IF NOT EXISTS jobs_by_key ON jobs (key);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
"""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def result_key(task_source: str, code: str, settings: dict, device_name: str, version: str | None = None) -> str:
    """The store's key: a hash of the task source's hash, the code's hash, the settings (sorted JSON), the
    device's name and the harness version."""
    parts = {"task": sha(task_source), "code": sha(code), "settings": settings, "device": device_name,
             "harness": version or harness_version()}
    return sha(json.dumps(parts, sort_keys=True))


class Store:
    """Thread-safe access to the SQLite file (one connection, one lock; WAL so readers do not block)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self.lock = threading.Lock()
        with self.lock:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")  # with WAL: a committed result survives a crash of the server
            self.db.executescript(SCHEMA)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self.lock:
            return self.db.execute(sql, args).fetchall()

    # results
    def result(self, key: str) -> EvalResult | None:
        rows = self._rows("SELECT result FROM results WHERE key = ?", (key,))
        return EvalResult.from_json(rows[0][0]) if rows else None

    def put_result(self, key: str, result: EvalResult, task_name: str = "", device: str = "") -> bool:
        """Store a finished result; False (and nothing written) when the key already has one."""
        with self.lock:
            cursor = self.db.execute("INSERT OR IGNORE INTO results VALUES (?, ?, ?, ?, ?)",
                                     (key, result.to_json(), task_name, device, time.time()))
            return cursor.rowcount == 1

    def count_results(self) -> int:
        return self._rows("SELECT COUNT(*) FROM results")[0][0]

    # jobs
    def new_job(self, key: str, request: dict, cached: bool) -> str:
        job_id = uuid.uuid4().hex
        state = "done" if cached else "queued"
        with self.lock:
            self.db.execute("INSERT INTO jobs (id, key, state, request, cached, created, finished) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)", (job_id, key, state, json.dumps(request), int(cached),
                                                           time.time(), time.time() if cached else None))
        return job_id

    def job(self, job_id: str) -> dict | None:
        rows = self._rows("SELECT id, key, state, cached, attempts, error, created, finished FROM jobs WHERE id = ?",
                          (job_id,))
        if not rows:
            return None
        names = ("id", "key", "state", "cached", "attempts", "error", "created", "finished")
        job = dict(zip(names, rows[0]))
        job["cached"] = bool(job["cached"])
        return job

    def mark_running(self, key: str) -> None:
        with self.lock:
            self.db.execute("UPDATE jobs SET state = 'running', attempts = attempts + 1 WHERE key = ? AND state IN "
                            "('queued', 'running')", (key,))

    def finish_jobs(self, key: str, error: str | None = None) -> None:
        """Every unfinished job of this key is done (its result is in results) or failed (error)."""
        with self.lock:
            self.db.execute("UPDATE jobs SET state = ?, error = ?, finished = ? WHERE key = ? AND state IN "
                            "('queued', 'running')", ("failed" if error else "done", error, time.time(), key))

    def unfinished_jobs(self) -> list[tuple[str, dict]]:
        """(key, request) of each key with jobs a stopped server left queued or running, oldest first."""
        rows = self._rows("SELECT key, request FROM jobs WHERE state IN ('queued', 'running') ORDER BY created")
        seen: dict[str, dict] = {}
        for key, request in rows:
            seen.setdefault(key, json.loads(request))
        return list(seen.items())

    def count_jobs(self) -> dict[str, int]:
        return dict(self._rows("SELECT state, COUNT(*) FROM jobs GROUP BY state"))

    def close(self) -> None:
        with self.lock:
            self.db.close()
