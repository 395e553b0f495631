"""The job protocol: what crosses between the caller, the zygote, a supervisor and its worker.

A Job goes down as one JSON line (caller -> supervisor over a unix socket, supervisor -> worker over
a pipe). The worker answers on its status pipe with JSON lines: {"stage": name} as it goes,
{"result": RawResult} once, then, when it may serve again, {"gpu_released": true} and
{"reuse": bool, "why": [...]} after checking itself (reuse.py). The supervisor sends the RawResult on
to the caller, which turns it into an EvalResult (evaluate.py).

The candidate runs in the worker's process, where the status pipe is open, so every status line is
signed (HMAC-SHA256) with a key the supervisor makes for the job: a line the candidate writes itself
cannot carry a valid signature, and the supervisor calls any such line a hack.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import asdict, dataclass, field

from drk_lab.common.timing import FLUSH_BYTES
from drk_lab.hacks.catalogue import ERROR_KINDS
from drk_lab.harness.result import EvalResult
from drk_lab.harness.shapes import OtherShape

# Seconds each stage may take (a job's stage_timeouts override them). Trials are "trial0", "trial1", ...
STAGE_TIMEOUTS = {"start": 120.0, "load": 60.0, "trial": 60.0, "timing": 120.0, "ncu": 300.0,
                  "compile_reference": 900.0}
MAX_LOCK_WAIT_S = 1800.0  # waiting for the GPU's timing lock does not count against timeout_s
# outcomes after which a worker may be reused (if it checks clean); after anything else it retires
REUSABLE_OUTCOMES = {None} | {k.name for k in ERROR_KINDS.values() if k.worker_reusable}


COMPILE_NOT_ASKED = "not asked for (compile_baseline=False)"  # a baseline's compile_error when eager only


@dataclass
class Job:
    """One evaluation (mode "candidate") or one reference timing (mode "baseline")."""

    mode: str
    task_source: str
    code: str | None = None
    task_name: str = ""
    seed: int = 0  # set before both models are built, so their weights agree
    trial_seeds: list[int] = field(default_factory=list)  # inputs of each correctness trial
    timing_seed: int = 0  # inputs of the timed calls
    correctness_trials: int = 5
    timing: bool = True
    compile_baseline: bool = True  # a baseline job: also time the reference under torch.compile
    timing_trials: int = 100
    warmup: int = 3
    flush_bytes: int = FLUSH_BYTES
    atol: float | None = None
    rtol: float | None = None
    timeout_s: float = 120.0
    stage_timeouts: dict[str, float] = field(default_factory=dict)
    hack_checks: bool = True
    profile: bool | str = True  # False, True (torch.profiler) or "ncu"
    env: dict[str, str] = field(default_factory=dict)  # set in the worker before the job runs
    other_shape: OtherShape | None = None  # another valid shape of the task, for the extra-shape check
    host_memory_bytes: int = 0  # the worker's limit; the caller's sandbox fills it in
    copy_bandwidth: float | None = None  # bytes/s of a device copy, from the caller's cache (timing.py)
    device: str = "cpu"  # filled in by the caller's sandbox
    lock_dir: str = ""  # the GPU locks' folder, filled in by the caller's sandbox
    workdir: str = ""  # the job's folder (reference.py, candidate.py), made by whoever starts the worker
    key: str = ""  # signs the worker's status lines; made by the supervisor, dropped by the worker before any job code

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, line: str | bytes) -> Job:
        data = json.loads(line)
        if data.get("other_shape"):
            data["other_shape"] = OtherShape(**data["other_shape"])
        return cls(**data)

    def stage_limit(self, stage: str) -> float | None:
        """Seconds `stage` may take; None for waiting on the GPU's timing lock."""
        if stage == "wait_lock":
            return None
        kind = "trial" if stage.startswith("trial") else stage
        return {**STAGE_TIMEOUTS, **self.stage_timeouts}.get(kind, 120.0)

    def write_files(self) -> None:
        """The job's folder: the task as reference.py and the candidate as candidate.py."""
        with open(os.path.join(self.workdir, "reference.py"), "w") as f:
            f.write(self.task_source)
        if self.code is not None:
            with open(os.path.join(self.workdir, "candidate.py"), "w") as f:
                f.write(self.code)


@dataclass
class RawResult(EvalResult):
    """What a worker reports (or the supervisor, for a worker that died): the result's fields as far as
    the evaluation got, plus raw timing statistics that evaluate() turns into speedups."""

    timing: dict | None = None  # the candidate's timing statistics (timing.time_cuda)
    baseline: dict | None = None  # a baseline job's: {"eager", "compile", "compile_error"}

    def to_eval_result(self) -> EvalResult:
        data = self.to_dict()
        del data["timing"], data["baseline"]
        return EvalResult(**data)


def encode(message: dict) -> bytes:
    return (json.dumps(message) + "\n").encode()


def new_key() -> str:
    return os.urandom(16).hex()


def signed(message: dict, key: str) -> bytes:
    payload = json.dumps(message)
    return f"{_signature(payload.encode(), key)} {payload}\n".encode()


def _signature(payload: bytes, key: str) -> str:
    return hmac.new(key.encode(), payload, hashlib.sha256).hexdigest()


LAUNCHER = b"launcher "  # an unsigned status line: the worker asks for a Triton launcher (triton_cache.py)


def pop_message(buffer: bytes, key: str) -> tuple[dict | None, bytes]:
    """The first whole line of what the worker wrote on its status pipe, checked against the job's key,
    and the rest of the buffer; None when no whole line is there yet. A line without a valid signature
    comes back as {"forged": its start}."""
    if b"\n" not in buffer:
        return None, buffer
    line, buffer = buffer.split(b"\n", 1)
    if line.startswith(LAUNCHER):  # needs no signature: the supervisor can only build Triton's code from it
        return {"build_launcher": line[len(LAUNCHER):].decode(errors="replace")}, buffer
    signature, _, payload = line.partition(b" ")
    if key and hmac.compare_digest(signature, _signature(payload, key).encode()):
        try:
            return json.loads(payload), buffer
        except ValueError:
            pass
    return {"forged": line[:200].decode(errors="replace")}, buffer


def read_line(fd: int) -> bytes:
    """One line from a pipe; b"" at EOF. Nothing follows a job line until the worker has reported (the
    acknowledgement), so reading in chunks consumes nothing else."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b""
        data += chunk
    return data
