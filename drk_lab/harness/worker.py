"""What runs inside one isolated worker process: load, correctness trials, timing.

The worker reports progress and its result as JSON lines on a status pipe; the supervisor in
sandbox.py enforces the deadlines and classifies deaths. Nothing here is ever run in the
caller's process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import select
import sys
import time
import traceback
import types
from contextlib import nullcontext
from functools import partial

import torch

from drk_lab.hacks import runtime_checks
from drk_lab.hacks.catalogue import Finding, verdict
from drk_lab.harness import correctness
from drk_lab.harness.gpulock import LIFECYCLE_LOCK, GpuLock
from drk_lab.harness.launches import KernelLaunches
from drk_lab.harness.timing import time_cuda

IMPOSSIBLE_FRACTION = 1.5  # of the measured copy bandwidth, for the bytes of inputs and outputs


class Stage(Exception):
    """A classified failure that ends the evaluation."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def classify(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, SystemExit):
        return "exit"
    if isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)) or "out of memory" in text.lower():
        return "oom"
    if any(s in text for s in ("illegal memory access", "misaligned address", "illegal instruction",
                               "unspecified launch failure", "cudaErrorIllegalAddress")):
        return "cuda_illegal_access"
    module = type(e).__module__ or ""
    if module.startswith("triton.compiler") or type(e).__name__ in ("CompilationError", "OutOfResources"):
        return "compile"
    if "CUDA error" in text or "CUDA driver error" in text or type(e).__name__ == "AcceleratorError":
        return "cuda_error"
    return "runtime"


def short_traceback(e: BaseException, limit: int = 4000) -> str:
    """The exception and the frames in the candidate's or task's own files, bounded."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.basename(f.filename) in ("candidate.py", "reference.py")]
    for f in frames:
        f.filename = os.path.basename(f.filename)
    where = "".join(traceback.format_list(frames[-3:]))
    text = (where + "".join(traceback.format_exception_only(type(e), e))).strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


def load_module(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def module_from_source(name: str, source: str):
    """A module run from source text; tracebacks name it reference.py like the task's own file."""
    module = types.ModuleType(name)
    module.__file__ = os.path.abspath("reference.py")
    sys.modules[name] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)  # seeds every CUDA device too


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(module, class_name: str, init_inputs: list, seed: int, device: torch.device):
    seed_all(seed)
    with torch.device(device):
        return getattr(module, class_name)(*init_inputs)


def make_inputs(ref_module, seed: int, device: torch.device) -> list:
    seed_all(seed)
    with torch.device(device):  # factory calls in get_inputs() land on the device directly
        inputs = list(ref_module.get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def copy_weights(ref: torch.nn.Module, new: torch.nn.Module) -> None:
    """Same seed before both constructions gives identical weights when the parameters are created
    in the same order; copying the reference's state dict covers any other order of creation."""
    ref_state, new_state = ref.state_dict(), new.state_dict()
    if ref_state.keys() == new_state.keys() and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
        new.load_state_dict(ref_state)


class Worker:
    def __init__(self, job: dict, status_fd: int):
        self.job = job
        self.status = os.fdopen(status_fd, "w", buffering=1, closefd=False)
        self.device = torch.device(job["device"])
        self.lock = GpuLock(job["lock_dir"], self.device.index or 0) if self.device.type == "cuda" else None
        if self.lock:
            self.lock.release_while_compiling()
        self.checks = job.get("hack_checks", True)
        self.profiling = job.get("profile", True)
        self.snapshot = None
        self.candidate_module = None
        self.stage_seconds: dict[str, float] = {}

    def report(self, **message) -> None:
        self.status.write(json.dumps(message) + "\n")

    def stage(self, name: str) -> None:
        self.report(stage=name)
        self._stage, self._t0 = name, time.perf_counter()
        if self.lock:
            self.lock.label = name

    def end_stage(self) -> None:
        self.stage_seconds[self._stage] = self.stage_seconds.get(self._stage, 0.0) + time.perf_counter() - self._t0

    def run(self) -> dict:
        result = {"device": str(self.device), "versions": versions()}
        try:
            if self.device.type == "cuda":
                result["device"] = torch.cuda.get_device_name(self.device)
            if self.job["mode"] == "baseline":
                result["baseline"] = self.baseline()
            else:
                self.candidate(result)
        except Stage as s:
            result.update(error_kind=s.kind, error=str(s))
        except BaseException as e:  # a harness bug must still come back as a result
            result.update(error_kind="harness", error=short_traceback(e))
        result["stage_seconds"] = self.stage_seconds
        return result

    def load(self, with_candidate: bool):
        self.stage("load")
        # model construction and CUDA's start put work on the GPU: keep it out of others' timing
        with self.lock.shared() if self.lock else nullcontext():
            loaded = self._load(with_candidate)
        self.end_stage()
        return loaded

    def _load(self, with_candidate: bool):
        try:
            ref_module = load_module("reference", "reference.py")
            init_inputs = list(ref_module.get_init_inputs())
            ref = build(ref_module, "Model", init_inputs, self.job["seed"], self.device)
        except BaseException as e:
            raise Stage("reference", "the task's reference failed to load: " + short_traceback(e)) from None
        new = None
        if with_candidate:
            self.snapshot = runtime_checks.Snapshot() if self.checks else None
            try:
                self.candidate_module = load_module("candidate", "candidate.py")
                new = build(self.candidate_module, "ModelNew", init_inputs, self.job["seed"], self.device)
                copy_weights(ref, new)
            except BaseException as e:
                kind = classify(e)
                raise Stage("load" if kind == "runtime" else kind, short_traceback(e)) from None
        return ref_module, ref, new

    def candidate(self, result: dict) -> None:
        """Fills `result` in place, so that what was learnt before a failure is kept."""
        ref_module, ref, new = self.load(with_candidate=True)
        trials, seeds = self.job["correctness_trials"], self.job["trial_seeds"]
        result["seeds"] = [self.job["seed"], *seeds]
        specs: list = []
        prints: list[tuple[str, str]] = []  # fingerprints of (candidate, reference) outputs per trial
        kernel_names: set[str] = set()
        for i in range(trials):
            self.stage(f"trial{i}")
            with self.lock.shared() if self.lock else nullcontext():
                inputs = make_inputs(ref_module, seeds[i], self.device)
                pristine, new_inputs, ref_inputs = inputs, correctness.clone_args(inputs), correctness.clone_args(inputs)
                correctness.poison_memory(specs + correctness.tensor_specs(inputs), self.device)
                try:
                    with torch.no_grad(), self.launches() as launches:
                        out = new(*new_inputs)
                        sync(self.device)
                except BaseException as e:
                    raise Stage(classify(e), short_traceback(e)) from None
                result["compiled"] = True
                changed = correctness.mutated_inputs(pristine, new_inputs)
                if changed:
                    self.flag(result, [("input_mutation", f"the forward modified its input(s) {changed} in place")])
                if self.checks:
                    self.flag(result, self.after_forward(launches, f"trial {i}"))
                if launches is not None:
                    kernel_names |= launches.names()
                try:
                    with torch.no_grad():
                        ref_out = ref(*ref_inputs)
                        sync(self.device)
                except BaseException as e:
                    raise Stage("reference", "the reference forward failed: " + short_traceback(e)) from None
                try:
                    err = correctness.compare(out, ref_out, self.job.get("atol"), self.job.get("rtol"))
                except correctness.Mismatch as m:
                    if self.checks:
                        self.flag(result, runtime_checks.precision_findings(out, ref_out, f"trial {i}"))
                    raise Stage("mismatch", f"trial {i} (seed {seeds[i]}): {m}") from None
                result["max_abs_error"] = max(err, result.get("max_abs_error") or 0.0)
                result["trials"] = i + 1
                specs = correctness.tensor_specs(ref_out)
                prints.append((runtime_checks.fingerprint(out), runtime_checks.fingerprint(ref_out)))
                del out, ref_out, inputs, pristine, new_inputs, ref_inputs
            self.end_stage()
        if self.checks:
            self.stage("hack_checks")
            if len({c for c, _ in prints}) == 1 and len({r for _, r in prints}) > 1:
                self.flag(result, [("constant_output", f"the same output for {trials} different inputs, "
                                    "where the reference's output changes")])
            with self.lock.shared() if self.lock else nullcontext():
                self.flag(result, self.call_checks(ref_module, ref, new))
            self.end_stage()
            if self.job.get("other_shape"):
                self.stage("other_shape")
                with self.lock.shared() if self.lock else nullcontext():
                    self.flag(result, self.other_shape_check(result))
                self.end_stage()
        result["correct"] = True
        if self.job["timing"] and self.device.type == "cuda":
            result["timing"] = self.time_model(ref_module, new, kernel_names if self.checks or self.profiling else None,
                                               result)

    def time_model(self, ref_module, model, kernel_names: set[str] | None = None, result: dict | None = None) -> dict:
        """Time the model under the exclusive lock. With kernel_names (a candidate with hack checks or
        profiling on), also its bandwidth against the measured copy, its profile (kernel table,
        coverage; under the shared lock) and the speed-of-light check."""
        from drk_lab.harness import profiler

        self.stage("wait_lock")
        with self.lock.exclusive():
            self.end_stage()
            self.stage("timing")
            inputs = make_inputs(ref_module, self.job["timing_seed"], self.device)
            with torch.no_grad():
                stats = time_cuda(model, inputs, self.job["warmup"], self.job["timing_trials"], self.job["flush_bytes"])
                if kernel_names is not None:
                    moved = profiler.io_bytes(inputs, model(*inputs))
                    copy = profiler.copy_bandwidth(self.device)  # measured once per device, with the GPU to itself
            self.end_stage()
        if kernel_names is None:
            return stats
        fraction = profiler.achieved_bandwidth(moved, stats["median_ms"] * 1e-3, copy).get("fraction")
        result["bandwidth_fraction"] = fraction
        if self.profiling:
            self.stage("profile")
            with torch.no_grad():
                prof = profiler.profile_forward(model, inputs, kernel_names, hold_gpu=self.lock.shared)
            result["coverage"], result["kernels"] = prof.get("coverage"), prof.get("kernels") or []
            self.end_stage()
            ncu = self.ncu_metrics(kernel_names, result) if self.profiling == "ncu" else None
            result["bottleneck"] = profiler.bottleneck_summary(result["kernels"], result["coverage"], fraction,
                                                               stats["median_ms"], ncu=ncu)
        if self.checks and (fraction or 0.0) > IMPOSSIBLE_FRACTION:
            self.flag(result, [("impossible_speedup", f"{fraction:.1f}x the measured copy bandwidth for the bytes "
                                f"its inputs and outputs hold ({stats['median_ms']:.4f} ms)")])
        return stats

    def ncu_metrics(self, kernel_names: set[str], result: dict) -> dict:
        """Nsight Compute's DRAM throughput and occupancy per candidate kernel, added to its row of
        the kernel table; ncu replays kernels, so it holds the GPU alone."""
        from drk_lab.harness.ncu import ncu_metrics
        from drk_lab.harness.profiler import candidate_matcher
        from drk_lab.harness.sandbox import stage_limit

        self.stage("wait_lock")
        with self.lock.exclusive():
            self.end_stage()
            self.stage("ncu")
            ncu = ncu_metrics(".", kernel_names, seed=self.job["timing_seed"],
                              timeout_s=stage_limit("ncu", self.job.get("stage_timeouts", {})) - 10)
            self.end_stage()
        matcher, measured = candidate_matcher(kernel_names), ncu["kernels"] or {}
        for row in result["kernels"]:
            own = row["candidate"] and matcher.match(row["name"])
            row.update(measured.get(own.group("name"), {}) if own else {})
        if ncu["reason"]:
            result.setdefault("notes", []).append(f"no Nsight Compute metrics: {ncu['reason']}")
        return ncu

    # ---- hack checks ---------------------------------------------------------------------------
    def launches(self, disabled: bool = False):
        if not (self.checks or self.profiling):
            return nullcontext()
        return KernelLaunches(only_file=os.path.abspath("candidate.py"), disabled=disabled)

    def flag(self, result: dict, findings: list[tuple[str, str]]) -> None:
        if findings:
            codes, text = verdict([Finding(code, message) for code, message in findings])
            result.update(hacked=True, hack_reasons=codes)
            raise Stage("hacked", text)

    def after_forward(self, launches, label: str) -> list[tuple[str, str]]:
        found = runtime_checks.launch_findings(launches, label) + self.snapshot.findings()
        children = runtime_checks.child_processes()
        if children:
            found.append(("background_work", f"{label}: left {len(children)} child process(es) running"))
        return found

    def call_checks(self, ref_module, ref, new) -> list[tuple[str, str]]:
        """Calls beyond the correctness trials: the same buffers twice, new values in the same
        buffers, and the candidate's own kernels switched off."""
        seed = self.job["trial_seeds"][0] + 1
        compare = partial(correctness.compare, atol=self.job.get("atol"), rtol=self.job.get("rtol"))
        inputs = make_inputs(ref_module, seed, self.device)
        with torch.no_grad():
            new(*inputs)
            with self.launches() as again:
                before = correctness.clone_args(correctness.flatten(new(*inputs)))
            sync(self.device)
            if not again.candidate_launches():
                return [("launch_reuse", "a second call on the same inputs launched none of its kernels")]
            for buffer, fresh in zip(inputs, make_inputs(ref_module, seed + 1, self.device)):
                if isinstance(buffer, torch.Tensor) and buffer.shape == fresh.shape:
                    buffer.copy_(fresh)
            ref_out = ref(*correctness.clone_args(inputs))
            out = new(*inputs)
            try:
                compare(out, ref_out)
            except correctness.Mismatch as m:
                try:
                    correctness.compare(out, before, 0.0, 0.0)
                except correctness.Mismatch:  # wrong, but not the previous answer: a plain failure
                    raise Stage("mismatch", f"a further call with new values in the same input buffers: {m}") from None
                return [("caches_outputs", "returned its previous output when called again with new values in "
                         f"the same input buffers: {m}")]
            del out, before
            specs = correctness.tensor_specs(ref_out)
            del ref_out
            inputs = make_inputs(ref_module, seed + 2, self.device)
            ref_out = ref(*correctness.clone_args(inputs))
            correctness.poison_memory(specs + correctness.tensor_specs(inputs), self.device)
            try:
                with self.launches(disabled=True):
                    out = new(*inputs)
                    sync(self.device)
                compare(out, ref_out)
            except Exception:
                return []  # without its kernels the answer is wrong (or it fails): the kernels do the work
        return [("torch_does_the_work", "the output is still right with the candidate's Triton launches switched off")]

    def other_shape_check(self, result: dict) -> list[tuple[str, str]]:
        """One trial at another valid shape of the task (chosen by shapes.py): the reference and a
        fresh ModelNew built there from the same seed, compared once."""
        other = self.job["other_shape"]
        where = "at " + ", ".join(f"{name}={value}" for name, value in other["sizes"].items())
        try:
            ref_module = module_from_source("reference_other_shape", other["source"])
            init_inputs = list(ref_module.get_init_inputs())
            other_ref = build(ref_module, "Model", init_inputs, self.job["seed"], self.device)
            inputs = make_inputs(ref_module, other["seed"], self.device)
            with torch.no_grad():
                ref_out = other_ref(*correctness.clone_args(inputs))
                sync(self.device)
        except BaseException as e:
            result.setdefault("notes", []).append(f"extra-shape check skipped: the reference fails {where}: "
                                                  + short_traceback(e, 500))
            return []
        try:
            other_new = build(self.candidate_module, "ModelNew", init_inputs, self.job["seed"], self.device)
            copy_weights(other_ref, other_new)
            with torch.no_grad(), self.launches() as launches:
                out = other_new(*inputs)
                sync(self.device)
            correctness.compare(out, ref_out, self.job.get("atol"), self.job.get("rtol"))
        except correctness.Mismatch as m:
            return [("shape_specialized", f"wrong {where} (another valid shape of the task): {m}")]
        except BaseException as e:
            return [("shape_specialized", f"fails {where} (another valid shape of the task): {short_traceback(e, 1000)}")]
        return runtime_checks.launch_findings(launches, where)

    def baseline(self) -> dict:
        """Eager and torch.compile timings of the reference alone (no candidate code loaded)."""
        ref_module, ref, _ = self.load(with_candidate=False)
        out = {"eager": self.time_model(ref_module, ref), "compile": None, "compile_error": None}
        self.stage("compile_reference")
        try:
            compiled = torch.compile(ref)
            with torch.no_grad():
                compiled(*make_inputs(ref_module, self.job["timing_seed"], self.device))
            sync(self.device)
        except BaseException as e:
            out["compile_error"] = short_traceback(e, 1000)
            self.end_stage()
            return out
        self.end_stage()
        out["compile"] = self.time_model(ref_module, compiled)
        return out


def versions() -> dict:
    import platform

    import triton

    v = {"python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__}
    if torch.version.cuda:
        v["cuda"] = torch.version.cuda
    return v


def main(job: dict, status_fd: int, ack_fd: int | None = None, world=None) -> bool:
    """Entry point inside the worker process (forked or spawned). Without `world` (a
    reuse.WorldState) it never returns; with one it returns True when the worker may take another
    job, after reporting {"reuse": true}; otherwise it reports why not and exits.

    With LIFECYCLE_LOCK on CUDA the result is reported under a shared GPU lock, held until the
    supervisor has joined it (a line on ack_fd): this process's CUDA context then goes away (or
    is checked for reuse) outside anyone's timing."""
    worker = Worker(job, status_fd)
    hold = worker.lock is not None and ack_fd is not None and LIFECYCLE_LOCK
    reuse = False
    try:
        result = worker.run()
        if hold:
            worker.lock.label = "after_result"
            worker.lock.acquire(exclusive=False)
        sys.stdout.flush()
        sys.stderr.flush()
        worker.report(result=result)
        worker.status.flush()
        if hold and select.select([ack_fd], [], [], 10.0)[0]:
            os.read(ack_fd, 1)  # the ack is one byte: take it, or the next job's line would start with it
        if world is not None:
            why = reuse_refusal(job, result)
            del worker.candidate_module, worker.snapshot, result
            if not why:
                why = world.leftover_work()
            if not why:  # nothing of the job runs any more: the GPU is free while the CPU forgets it
                if hold:
                    worker.lock.release()
                    worker.report(gpu_released=True)
                world.forget_job(job["workdir"])
                if worker.lock:
                    worker.lock.label = "cuda_check"
                with worker.lock.shared() if worker.lock else nullcontext():
                    why = world.gpu_differences()
                why = why or world.process_differences()
                if why and hold:  # this context goes away under the lock too
                    worker.lock.acquire(exclusive=False, queue=False)
            worker.report(reuse=not why, why=why[:5])
            if os.environ.get("DRK_REUSE_LOG"):  # a JSONL file: why workers retire, for studying the harness
                with open(os.environ["DRK_REUSE_LOG"], "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "task": job.get("task_name"), "why": why[:20]}) + "\n")
            worker.status.flush()
            reuse = not why
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if not reuse:
            os._exit(0)  # skip interpreter teardown: the candidate may have left threads or atexit hooks
    if worker.lock:
        worker.lock.release()
    return True


def reuse_refusal(job: dict, result: dict) -> list[str]:
    from drk_lab.harness.reuse import REUSABLE_OUTCOMES

    if job["mode"] != "candidate":
        return ["a baseline job compiles with torch.compile, which changes too much"]
    if result.get("hacked") or result.get("error_kind") not in REUSABLE_OUTCOMES:
        return [f"the evaluation ended {result.get('error_kind') or 'hacked'}"]
    return []
