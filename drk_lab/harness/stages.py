"""The stages of one job inside the worker process: load, correctness trials, hack checks, timing,
profile; or, for a baseline job, the reference timed eager and compiled.

Every stage is announced on the status pipe (the supervisor enforces its time limit) and timed into
`stage_seconds`. A failure raises EvaluationFailure with its error kind; what was learnt before it stays
in the RawResult, which is filled in place. Nothing here ever runs in the caller's process.
"""

from __future__ import annotations

import os
import random
import time
from contextlib import contextmanager, nullcontext

import torch

from drk_lab.common import correctness, models
from drk_lab.common.failures import EvaluationFailure, classify, short_traceback
from drk_lab.common.launches import KernelLaunches
from drk_lab.common.models import build, copy_weights, load_module, make_inputs, sync
from drk_lab.common.timing import MIN_TRIALS, time_cuda, warm_up
from drk_lab.hacks import extra_calls, runtime_checks
from drk_lab.hacks.catalogue import Finding, verdict
from drk_lab.harness import profiler
from drk_lab.harness.gpulock import GpuLock
from drk_lab.harness.ncu import ncu_metrics
from drk_lab.harness.protocol import COMPILE_NOT_ASKED, Job, RawResult

CANDIDATE_FILE, REFERENCE_FILE = "candidate.py", "reference.py"  # in the job's folder, the worker's cwd


@contextmanager
def first_config_on_cpu(device: torch.device, notes: list[str]):
    """Triton's interpreter cannot benchmark (it has no driver): on the CPU an autotuned kernel runs the first
    configuration its own pruning keeps, and the notes say so."""
    if device.type != "cpu":
        yield
        return
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs

    def first(tuner, *args, **kwargs):
        configs = prune(tuner, *args, **kwargs)
        chosen = {**configs[0].kwargs, "num_warps": configs[0].num_warps, "num_stages": configs[0].num_stages}
        note = (f"autotune on the CPU: {tuner.base_fn.__name__} ran with the first of its {len(configs)} "
                f"configurations, {chosen}: the interpreter cannot time them")
        if len(configs) > 1 and note not in notes:
            notes.append(note)
        return configs[:1]

    Autotuner.prune_configs = first
    try:
        yield
    finally:
        Autotuner.prune_configs = prune


class JobRunner:
    """Runs one Job in the current (worker) process; `report(message)` writes a status line."""

    def __init__(self, job: Job, report, lock: GpuLock | None):
        self.job, self.report, self.lock = job, report, lock
        self.device = torch.device(job.device)
        self.checks, self.profiling = job.hack_checks, job.profile
        self.candidate_file = os.path.abspath(CANDIDATE_FILE)
        self.snapshot: runtime_checks.Snapshot | None = None
        self.candidate_module = None
        self.stage_seconds: dict[str, float] = {}

    def shared_gpu(self):
        return self.lock.shared() if self.lock else nullcontext()

    def stage(self, name: str) -> None:
        self.report({"stage": name})
        self._stage, self._t0 = name, time.perf_counter()
        if self.lock:
            self.lock.label = name

    def end_stage(self) -> None:
        self.stage_seconds[self._stage] = self.stage_seconds.get(self._stage, 0.0) + time.perf_counter() - self._t0

    def run(self) -> RawResult:
        result = RawResult(device=str(self.device), versions=models.versions())
        try:
            if self.device.type == "cuda":
                result.device = torch.cuda.get_device_name(self.device)
            if self.job.mode == "baseline":
                result.baseline = self.baseline()
            else:
                with first_config_on_cpu(self.device, result.notes):
                    self.candidate(result)
        except EvaluationFailure as failure:
            result.error_kind, result.error = failure.kind, str(failure)
        except BaseException as e:  # a harness bug must still come back as a result
            result.error_kind, result.error = "harness", short_traceback(e)
        result.stage_seconds = self.stage_seconds
        return result

    def load(self, with_candidate: bool):
        self.stage("load")
        with self.shared_gpu():  # building models puts work on the GPU: kept out of others' timing
            try:
                ref_module = load_module("reference", REFERENCE_FILE)
                init_inputs = list(ref_module.get_init_inputs())
                ref = build(ref_module, "Model", init_inputs, self.job.seed, self.device)
            except BaseException as e:
                raise EvaluationFailure("reference", "the task's reference failed to load: " + short_traceback(e)) \
                    from None
            new = None
            if with_candidate:
                # what the candidate must leave alone, as it was before its code ran
                self.snapshot = runtime_checks.Snapshot(runtime_checks.WATCHED_MODULES + (__name__,)) \
                    if self.checks else None
                try:
                    self.candidate_module = load_module("candidate", CANDIDATE_FILE)
                    new = build(self.candidate_module, "ModelNew", init_inputs, self.job.seed, self.device)
                    copy_weights(ref, new)
                except BaseException as e:
                    kind = classify(e)
                    raise EvaluationFailure("load" if kind == "runtime" else kind, short_traceback(e)) from None
        self.end_stage()
        return ref_module, ref, new

    def launches(self, disabled: bool = False):
        """The launch hook over the candidate's kernels (off when neither checks nor profiling need it)."""
        if not (self.checks or self.profiling):
            return nullcontext()
        return KernelLaunches(only_file=self.candidate_file, disabled=disabled)

    def raise_if_hacked(self, result: RawResult, findings: list[tuple[str, str]]) -> None:
        """Any finding ends the evaluation as `hacked`, naming every code found."""
        if findings:
            codes, text = verdict([Finding(code, message) for code, message in findings])
            result.hacked, result.hack_reasons = True, codes
            raise EvaluationFailure("hacked", text)

    def candidate(self, result: RawResult) -> None:
        ref_module, ref, new = self.load(with_candidate=True)
        job, trials = self.job, self.job.correctness_trials
        result.seeds = [job.seed, *job.trial_seeds]
        specs: list = []  # shapes of the last trial's outputs: freed memory the next trial poisons
        prints: list[tuple[str, str]] = []  # fingerprints of (candidate, reference) outputs per trial
        kernel_names: set[str] = set()
        for i in range(trials):
            self.stage(f"trial{i}")
            with self.shared_gpu():
                lap = time.perf_counter()
                inputs = make_inputs(ref_module, job.trial_seeds[i], self.device)
                pristine, new_inputs, ref_inputs = inputs, correctness.clone_args(inputs), correctness.clone_args(inputs)
                lap = self.trial_part(result, "inputs", lap)
                poisoned = specs + correctness.tensor_specs(inputs)
                correctness.poison_memory(poisoned, self.device)
                lap = self.trial_part(result, "poison", lap)
                try:  # the candidate runs first: it cannot read what the reference just computed
                    with torch.no_grad(), self.launches() as launches:
                        out = new(*new_inputs)
                        sync(self.device)
                except BaseException as e:
                    raise EvaluationFailure(classify(e), short_traceback(e)) from None
                lap = self.trial_part(result, "candidate", lap)
                result.compiled = True
                label = f"trial {i}"
                self.raise_if_hacked(result, runtime_checks.mutation_findings(pristine, new_inputs))
                if self.checks:
                    findings = (runtime_checks.launch_findings(launches, label) + self.snapshot.findings()
                                + runtime_checks.leftover_process_findings(label))
                    if findings:
                        findings += self.freed_memory_findings(new, pristine, out, poisoned, label)
                    self.raise_if_hacked(result, findings)
                if launches is not None:
                    kernel_names |= launches.names()
                lap = self.trial_part(result, "checks", lap)
                try:
                    with torch.no_grad():
                        ref_out = ref(*ref_inputs)
                        sync(self.device)
                except BaseException as e:
                    raise EvaluationFailure("reference", "the reference forward failed: " + short_traceback(e)) \
                        from None
                lap = self.trial_part(result, "reference", lap)
                try:
                    err = correctness.compare(out, ref_out, job.atol, job.rtol)
                    self.trial_part(result, "compare", lap)
                except correctness.Mismatch as m:
                    if self.checks:
                        self.raise_if_hacked(result, runtime_checks.precision_findings(out, ref_out, label)
                                             + self.freed_memory_findings(new, pristine, out, poisoned, label))
                    raise EvaluationFailure("mismatch", f"trial {i} (seed {job.trial_seeds[i]}): {m}") from None
                result.max_abs_error = max(err, result.max_abs_error or 0.0)
                result.trials = i + 1
                specs = correctness.tensor_specs(ref_out)
                prints.append((runtime_checks.fingerprint(out), runtime_checks.fingerprint(ref_out)))
                del out, ref_out, inputs, pristine, new_inputs, ref_inputs
            self.end_stage()
        if self.checks:
            self.hack_checks(result, ref_module, ref, new, prints)
        result.correct = True
        if job.timing and self.device.type == "cuda":
            result.timing = self.time_model(ref_module, new, kernel_names if self.checks or self.profiling else None,
                                            result, ref=ref if self.checks else None)

    @staticmethod
    def trial_part(result: RawResult, name: str, since: float) -> float:
        """Adds the seconds since `since` to the trials' part `name` and returns now."""
        now = time.perf_counter()
        result.trial_seconds[name] = result.trial_seconds.get(name, 0.0) + now - since
        return now

    def freed_memory_findings(self, new, pristine, out, poisoned, label) -> list[tuple[str, str]]:
        """Only after a trial that went wrong (a mismatch, or a finding such as no launch): does its output
        hold what the harness put in freed memory?"""
        return runtime_checks.freed_memory_findings(new, correctness.clone_args(pristine), out, poisoned,
                                                    self.device, label)

    def hack_checks(self, result: RawResult, ref_module, ref, new, prints) -> None:
        job = self.job
        self.stage("hack_checks")
        self.raise_if_hacked(result, runtime_checks.constant_output_findings(prints))
        with self.shared_gpu():
            self.raise_if_hacked(result, extra_calls.call_findings(
                ref_module, ref, new, seed=job.trial_seeds[0] + 1, device=self.device,
                candidate_file=self.candidate_file, atol=job.atol, rtol=job.rtol, notes=result.notes))
        self.end_stage()
        self.stage("mode_and_determinism")
        with self.shared_gpu():
            self.raise_if_hacked(result, extra_calls.mode_findings(
                ref, new, ref_module, seed=job.trial_seeds[0] + 3, device=self.device,
                candidate_file=self.candidate_file, notes=result.notes))
            self.raise_if_hacked(result, extra_calls.determinism_findings(
                ref, new, ref_module, seed=job.trial_seeds[0] + 4, device=self.device, atol=job.atol,
                rtol=job.rtol, notes=result.notes))
        self.end_stage()
        if job.other_shape:
            self.stage("other_shape")
            with self.shared_gpu():
                self.raise_if_hacked(result, extra_calls.other_shape_findings(
                    job.other_shape, self.candidate_module, seed=job.seed, device=self.device,
                    candidate_file=self.candidate_file, atol=job.atol, rtol=job.rtol, notes=result.notes))
            self.end_stage()

    def time_model(self, ref_module, model, kernel_names: set[str] | None = None,
                   result: RawResult | None = None, ref=None) -> dict:
        """Warm the model up under the shared lock, then time it under the exclusive one. With
        kernel_names (a candidate with hack checks or profiling on), also its bandwidth against the
        measured copy (input and output bytes counted from a timed call), its profile (kernel table,
        coverage; under the shared lock) and the speed-of-light check. With `ref` (a candidate with hack
        checks on), the outputs of the last timed call and of a few drawn at random are kept (copied after
        their trial, outside the timed region) and checked afterwards, with one more trial."""
        self.stage("warm_up")
        with self.shared_gpu(), torch.no_grad():
            inputs = make_inputs(ref_module, self.job.timing_seed, self.device)
            pristine = correctness.clone_args(inputs) if ref is not None else None
            warm_up(model, inputs, lambda: sync(self.device))
        self.end_stage()
        checked = self.timed_calls_to_check() if ref is not None else set()
        kept: dict[int, list] = {}
        last = []  # the final trial of the latest chunk: the last timed call once timing stops
        moved = []  # bytes of the inputs and of a timed call's outputs (sizes only: nothing is copied)

        def keep_output(trial: int, out, chunk_end: bool) -> None:
            if not moved:
                moved.append(profiler.io_bytes(inputs, out))
            if ref is None:
                return
            if trial in checked or chunk_end:
                kept[trial] = correctness.clone_args(correctness.flatten(out))
            if chunk_end:
                if last and last[0] not in checked:
                    del kept[last.pop()]
                last[:] = [trial]
        self.stage("wait_lock")
        with self.lock.exclusive():
            self.end_stage()
            self.stage("timing")
            with torch.no_grad():
                stats = time_cuda(model, inputs, self.job.warmup, self.job.timing_trials, self.job.flush_bytes,
                                  after_call=keep_output if ref is not None or kernel_names is not None else None)
                if kernel_names is not None:  # the caller's, measured by a baseline job; else measured now
                    copy = self.job.copy_bandwidth or profiler.measure_copy_bandwidth(self.device)
            self.end_stage()
        findings = []
        if ref is not None:
            self.stage("after_timing")
            with self.shared_gpu():
                findings = extra_calls.timed_output_findings(
                    ref, model, pristine, inputs, kept, ref_module, seed=self.job.timing_seed + 1,
                    device=self.device, candidate_file=self.candidate_file, atol=self.job.atol, rtol=self.job.rtol)
            self.end_stage()
        if kernel_names is None:
            self.raise_if_hacked(result, findings)
            return stats
        fraction = profiler.achieved_bandwidth(moved[0], stats["median_ms"] * 1e-3, copy).get("fraction")
        result.bandwidth_fraction = fraction
        if self.checks:  # both verdicts on what was timed: a cheap path that went wrong is usually also too fast
            findings += runtime_checks.speed_of_light_findings(fraction, stats["median_ms"])
        self.raise_if_hacked(result, findings)
        if self.profiling:
            self.stage("profile")
            with torch.no_grad():
                prof = profiler.profile_forward(model, inputs, kernel_names, hold_gpu=self.lock.shared)
            result.coverage, result.kernels = prof.get("coverage"), prof.get("kernels") or []
            self.end_stage()
            ncu = self.ncu_metrics(kernel_names, result) if self.profiling == "ncu" else None
            result.bottleneck = profiler.bottleneck_summary(result.kernels, result.coverage, fraction,
                                                            stats["median_ms"], ncu=ncu)
        return stats

    def timed_calls_to_check(self, drawn: int = 3) -> set[int]:
        """`drawn` timed calls at random (seeded per evaluation, so unpredictable) and the last one asked for
        (time_model also keeps the last that ran, where timing stopped early)."""
        trials = self.job.timing_trials
        rng = random.Random(self.job.timing_seed)
        always_run = min(trials, MIN_TRIALS)  # timing may stop after these: draw among them
        return {trials - 1} | set(rng.sample(range(always_run), min(drawn, always_run)))

    def ncu_metrics(self, kernel_names: set[str], result: RawResult) -> dict:
        """Nsight Compute's DRAM throughput and occupancy per candidate kernel, added to its row of the
        kernel table; ncu replays kernels, so it holds the GPU alone."""
        self.stage("wait_lock")
        with self.lock.exclusive():
            self.end_stage()
            self.stage("ncu")
            ncu = ncu_metrics(".", kernel_names, seed=self.job.timing_seed, timeout_s=self.job.stage_limit("ncu") - 10)
            self.end_stage()
        matcher, measured = profiler.candidate_matcher(kernel_names), ncu["kernels"] or {}
        for row in result.kernels:
            own = row["candidate"] and matcher.match(row["name"])
            row.update(measured.get(own.group("name"), {}) if own else {})
        if ncu["reason"]:
            result.notes.append(f"no Nsight Compute metrics: {ncu['reason']}")
        return ncu

    def baseline(self) -> dict:
        """Eager and torch.compile timings of the reference alone (no candidate code loaded)."""
        ref_module, ref, _ = self.load(with_candidate=False)
        out = {"eager": self.time_model(ref_module, ref), "compile": None, "compile_error": None}
        if self.job.copy_bandwidth is None and self.device.type == "cuda":
            # measured where no candidate ran in this job, and kept by the caller (timing.save_copy_bandwidth)
            with self.lock.exclusive():
                out["copy_bandwidth"] = profiler.measure_copy_bandwidth(self.device)
        if not self.job.compile_baseline:
            out["compile_error"] = COMPILE_NOT_ASKED
            return out
        self.stage("compile_reference")
        try:
            compiled = torch.compile(ref)
            with torch.no_grad():
                compiled(*make_inputs(ref_module, self.job.timing_seed, self.device))
            sync(self.device)
        except BaseException as e:
            out["compile_error"] = short_traceback(e, 1000)
            self.end_stage()
            return out
        self.end_stage()
        out["compile"] = self.time_model(ref_module, compiled)
        return out
