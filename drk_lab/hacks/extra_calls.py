"""Runtime checks that call the candidate beyond its correctness trials: the same buffers twice and new
values in them, its kernels switched off, another shape of the task, the mode it is not timed in, two
runs on the same inputs, and, after timing, what the timed calls returned.

Each returns findings as (code, message) pairs like runtime_checks.py; stages.py runs them.
May import the same as runtime_checks.py.
"""

from __future__ import annotations

import random
import sys
import threading
import warnings
from contextlib import contextmanager
from functools import partial

import torch
import torch.utils.deterministic

from drk_lab.common import correctness, models
from drk_lab.common.failures import EvaluationFailure, short_traceback
from drk_lab.common.launches import KernelLaunches
from drk_lab.hacks.runtime_checks import launch_findings
from drk_lab.hacks.torch_work import TorchWork, torch_share


TORCH_SHARE = 0.5  # of the reference's work, computed by PyTorch in the candidate's forward
RIGHT_WITHOUT_KERNELS = 0.25  # of the output, right with the candidate's kernels switched off


def call_findings(ref_module, ref, new, *, seed: int, device: torch.device, candidate_file: str,
                  atol: float | None, rtol: float | None, notes: list[str]) -> list[tuple[str, str]]:
    """Calls beyond the correctness trials: the same buffers twice, new values in the same buffers (all of
    them, then one), how much of the reference's work PyTorch does in the forward, and the candidate's own
    kernels switched off. A plain wrong answer raises a mismatch failure."""
    compare = partial(correctness.compare, atol=atol, rtol=rtol)
    inputs = models.make_inputs(ref_module, seed, device)
    with torch.no_grad():
        new(*inputs)
        with KernelLaunches(only_file=candidate_file) as again:
            before = correctness.clone_args(correctness.flatten(new(*inputs)))
        models.sync(device)
        if not again.candidate_launches():
            return [("launch_reuse", "a second call on the same inputs launched none of its kernels")]
        change_values(inputs, models.make_inputs(ref_module, seed + 1, device))
        with TorchWork() as ref_work:
            ref_out = ref(*correctness.clone_args(inputs))
        with KernelLaunches(only_file=candidate_file) as fresh, TorchWork() as new_work, other_threads() as threads:
            out = new(*inputs)
            models.sync(device)
        found = stale_findings(out, ref_out, before, compare, "new values in the same input buffers")
        if threads:  # PyTorch's work there is out of the dispatch mode's sight (modes are per thread)
            found.append(("background_work", f"the forward ran Python code in another thread ({threads[0]})"))
        skipped = sorted(fresh.names() - again.names())
        if skipped:  # a repeated call skipped work that new values need: an earlier answer served it
            found.append(("launch_reuse", f"a second call on the same inputs skipped {', '.join(skipped)}, which a "
                          "call with new values in the same buffers launches"))
        share = torch_share(new_work, ref_work)
        if share >= TORCH_SHARE:
            found.append(("torch_does_the_work", f"PyTorch computes {share:.0%} of the work the reference does "
                          f"({new_work.top()}) in the forward"))
        if found:
            return found
        before, unchanged = correctness.clone_args(correctness.flatten(out)), correctness.flatten(ref_out)
        for attempt in range(8):  # until the reference sees the change (ReLU maps any two negatives to 0)
            change_values(inputs, models.make_inputs(ref_module, seed + 5 + attempt, device), one=seed + attempt)
            ref_out = ref(*correctness.clone_args(inputs))
            if not all(map(correctness.same_bits, correctness.flatten(ref_out), unchanged)):
                break
        found = stale_findings(new(*inputs), ref_out, before, compare, "one value of its inputs changed")
        if found:
            return found
        del out, before  # freed, so that the poisoning below fills them
        specs = correctness.tensor_specs(ref_out)
        other_ref_out = ref_out  # kept alive (so never handed back to the candidate) for the test below
        inputs = models.make_inputs(ref_module, seed + 2, device)
        ref_out = ref(*correctness.clone_args(inputs))
        correctness.poison_memory(specs + correctness.tensor_specs(inputs), device)
        try:
            with KernelLaunches(only_file=candidate_file, disabled=True), new_memory_filled():
                out = new(*inputs)
                models.sync(device)
        except Exception:
            return []  # without its kernels it fails: the kernels do the work
    # Of the elements that neither zeros nor the answer for other inputs would get right (computed only now,
    # so that no copy of the answer made here lies in freed memory during the run above): an output buffer
    # the switched-off kernels never wrote can hold zeros, and a buffer the candidate reuses between calls
    # (honestly) still holds the last answer; neither says who did the work.
    share = right_share(out, ref_out, other_ref_out, atol, rtol)
    if share is None:
        notes.append("kernels-off check inconclusive: zeros or the reference's output for other inputs are within "
                     "tolerance of this one everywhere")
        return []
    if share >= RIGHT_WITHOUT_KERNELS:
        return [("torch_does_the_work", f"{share:.0%} of the output is still right with the candidate's Triton "
                 "launches switched off")]
    return []


def change_values(inputs: list, fresh: list, one: int | None = None) -> None:
    """New values into the same input buffers: all of them, or (with `one`, a seed) one element of each,
    where a cache keyed on a sample of the values would not look."""
    for buffer, new in zip(inputs, fresh):
        if not (isinstance(buffer, torch.Tensor) and isinstance(new, torch.Tensor) and buffer.shape == new.shape):
            continue
        if one is None:
            buffer.copy_(new)
        elif buffer.numel():
            flat, at = random.Random(one).randrange(buffer.numel()), []
            for size in reversed(buffer.shape):  # the flat index, unravelled (torch.unravel_index imports sympy)
                flat, i = divmod(flat, size)
                at.insert(0, i)
            buffer[tuple(at)] = new[tuple(at)]


def stale_findings(out, ref_out, before, compare, what: str) -> list[tuple[str, str]]:
    """A wrong output equal to the previous call's is a cache; wrong and different is a plain mismatch."""
    try:
        compare(out, ref_out)
    except correctness.Mismatch as m:
        try:
            correctness.compare(out, before, 0.0, 0.0)
        except correctness.Mismatch:
            raise EvaluationFailure("mismatch", f"a further call with {what}: {m}") from None
        return [("caches_outputs", f"returned its previous output when called again with {what}: {m}")]
    return []


def element_ok(out: torch.Tensor, ref: torch.Tensor, atol: float | None, rtol: float | None) -> torch.Tensor:
    """compare()'s rule, element by element."""
    if not ref.is_floating_point():
        return out == ref
    tol = correctness.TOLERANCES.get(ref.dtype, 1e-4)
    work = torch.float64 if ref.dtype == torch.float64 else torch.float32
    o, r = out.detach().to(work), ref.detach().to(work)
    a, rt = tol if atol is None else atol, tol if rtol is None else rtol
    return (o - r).abs() <= correctness.absolute_limit(r, a) + rt * r.abs()


def right_share(out, ref_out, others, atol: float | None, rtol: float | None) -> float | None:
    """Of the output elements that neither zeros nor `others` (the reference's output for other inputs)
    would get right, the share `out` gets right; None where there are none."""
    right = informative = 0
    for o, r, x in zip(correctness.flatten(out), correctness.flatten(ref_out), correctness.flatten(others)):
        if not isinstance(r, torch.Tensor):
            continue
        told = ~element_ok(torch.zeros_like(r), r, atol, rtol)
        if isinstance(x, torch.Tensor) and x.shape == r.shape and x.dtype == r.dtype:
            told &= ~element_ok(x, r, atol, rtol)
        informative += int(told.sum())
        if type(o) is torch.Tensor and o.shape == r.shape and o.dtype == r.dtype and o.device == r.device:
            right += int((element_ok(o, r, atol, rtol) & told).sum())
    return right / informative if informative else None


@contextmanager
def other_threads():
    """While in effect, the names of threads (started through `threading`) that run Python code."""
    seen, previous = [], threading.getprofile()

    def note(frame, event, arg):
        seen.append(threading.current_thread().name)
        sys.setprofile(None)  # once is enough

    threading.setprofile(note)
    try:
        yield seen
    finally:
        threading.setprofile(previous)


@contextmanager
def new_memory_filled():
    """While in effect, torch.empty and the like fill what they return (NaN for floats, the largest value
    for integers): PyTorch does so while deterministic algorithms are on. An output the switched-off
    kernels never wrote then cannot pass by holding a freed copy of the answer (the reference's last
    intermediate equals its output where the last operator is the identity on its input's range, as a
    LeakyReLU after a ReLU or an ELU after a sigmoid is; such honest kernels were flagged). Memory the
    candidate allocated earlier and kept keeps its contents, so a cached answer is still caught.
    warn_only: an op with no deterministic version runs as before instead of raising."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.utils.deterministic.fill_uninitialized_memory)
    # the C switch itself: torch.use_deterministic_algorithms also imports and configures Inductor (about
    # 900 modules and an environment variable), which a reused worker's check of itself would see as changed
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        torch._C._set_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.utils.deterministic.fill_uninitialized_memory = saved[2]


def other_shape_findings(other, candidate_module, *, seed: int, device: torch.device, candidate_file: str,
                         atol: float | None, rtol: float | None, notes: list[str]) -> list[tuple[str, str]]:
    """One trial at another valid shape of the task (`other`, chosen by harness/shapes.py): the reference,
    its parameters moved away from the values it was built with, and a fresh ModelNew built there from the
    same seed with the reference's parameters copied in, compared once. If the reference itself fails there,
    the check is skipped with a note. A candidate that is wrong there is run again with the parameters it
    was built with, to tell a shape it cannot do from parameters it ignores."""
    where = "at " + ", ".join(f"{name}={value}" for name, value in other.sizes.items())
    try:
        ref_module = models.module_from_source("reference_other_shape", other.source)
        init_inputs = list(ref_module.get_init_inputs())
        inputs = models.make_inputs(ref_module, other.seed, device)
        other_ref, ref_out = reference_at(ref_module, init_inputs, inputs, seed, device, moved=True)
    except BaseException as e:
        notes.append(f"extra-shape check skipped: the reference fails {where}: " + short_traceback(e, 500))
        return []
    try:
        out, seen = candidate_at(candidate_module, other_ref, init_inputs, inputs, seed, device, candidate_file)
        correctness.compare(out, ref_out, atol, rtol)
    except correctness.Mismatch as m:
        try:
            built_ref, built_out = reference_at(ref_module, init_inputs, inputs, seed, device, moved=False)
            out, _ = candidate_at(candidate_module, built_ref, init_inputs, inputs, seed, device, candidate_file)
            correctness.compare(out, built_out, atol, rtol)
        except BaseException:
            return [("shape_specialized", f"wrong {where} (another valid shape of the task): {m}")]
        return [("weights_specialized", f"wrong {where} once the parameters differ from the values it was built "
                 f"with (right with those): {m}")]
    except BaseException as e:
        return [("shape_specialized", f"fails {where} (another valid shape of the task): {short_traceback(e, 1000)}")]
    return launch_findings(seen, where)


def reference_at(ref_module, init_inputs: list, inputs: list, seed: int, device: torch.device, moved: bool):
    """The reference built from `seed` (its parameters and buffers moved with `moved`) and its output."""
    ref = models.build(ref_module, "Model", init_inputs, seed, device)
    if moved:
        move_parameters(ref, seed)
    with torch.no_grad():
        out = ref(*correctness.clone_args(inputs))
        models.sync(device)
    return ref, out


def candidate_at(candidate_module, ref, init_inputs: list, inputs: list, seed: int, device: torch.device,
                 candidate_file: str):
    new = models.build(candidate_module, "ModelNew", init_inputs, seed, device)
    models.copy_weights(ref, new)
    with torch.no_grad(), KernelLaunches(only_file=candidate_file) as seen:
        out = new(*correctness.clone_args(inputs))
        models.sync(device)
    return out, seen


def move_parameters(model: torch.nn.Module, seed: int) -> None:
    """Every floating parameter and buffer gets its own values in another order (the distribution the
    constructor drew them from: nothing overflows) and a shift by a tenth of its mean magnitude (a tenth,
    where it is all zeros: a LayerNorm's bias, a running mean), upwards only for buffers (a running variance
    stays positive). A forward that assumes the values its module was built with is then wrong."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for tensors, upwards in ((model.parameters(), False), (model.buffers(), True)):
            for t in tensors:
                if not t.is_floating_point() or not t.numel():
                    continue
                t.copy_(t.reshape(-1)[torch.randperm(t.numel(), generator=gen).to(t.device)].view_as(t))
                noise = torch.randn(t.shape, generator=gen).to(t.device, t.dtype)
                t.add_(0.1 * (noise.abs() if upwards else noise) * float(t.abs().mean() or 1.0))


def timed_output_findings(ref, new, pristine: list, timed_inputs: list, timed_outputs: dict, ref_module, *,
                          seed: int, device: torch.device, candidate_file: str, atol: float | None,
                          rtol: float | None) -> list[tuple[str, str]]:
    """After timing: were the timed calls what the checks saw? Their inputs must be unchanged, the outputs
    kept from some timed calls (trial -> flattened output, all made from `pristine` inputs) must match the
    reference's, and one more correctness trial with fresh inputs must pass on the same module instance,
    launching the candidate's kernels. A forward that counts its calls and turns cheap once the checks are
    over fails here; a plain mismatch would have failed the trials before timing."""
    changed = correctness.mutated_inputs(pristine, timed_inputs)
    if changed:
        return [("changes_after_checks", f"the timed calls modified their input(s) {changed} in place")]
    with torch.no_grad():
        expected = ref(*correctness.clone_args(pristine))
        models.sync(device)
    compared: list = []  # outputs already compared in full: a bit-identical one needs no second comparison
    for trial, out in sorted(timed_outputs.items()):
        if any(len(out) == len(c) and all(map(correctness.same_bits, out, c)) for c in compared):
            continue
        try:
            correctness.compare(out, correctness.flatten(expected), atol, rtol)
        except correctness.Mismatch as m:
            return [("changes_after_checks", f"timed call {trial + 1} returned a wrong output: {m}")]
        compared.append(out)
    inputs = models.make_inputs(ref_module, seed, device)
    new_inputs, ref_inputs = correctness.clone_args(inputs), correctness.clone_args(inputs)
    with torch.no_grad():
        with KernelLaunches(only_file=candidate_file) as seen:
            out = new(*new_inputs)
            models.sync(device)
        ref_out = ref(*ref_inputs)
        models.sync(device)
    try:
        correctness.compare(out, ref_out, atol, rtol)
    except correctness.Mismatch as m:
        return [("changes_after_checks", f"a correctness trial after timing failed: {m}")]
    if not seen.candidate_launches():
        return [("changes_after_checks", "after timing, a forward launched none of the candidate's kernels")]
    return []

def mode_findings(ref, new, ref_module, *, seed: int, device: torch.device, candidate_file: str,
                  notes: list[str]) -> list[tuple[str, str]]:
    """The candidate in the modes it is not timed in: eval mode with gradients on (correctness and
    timing run in train mode under no_grad). A forward that launches none of its kernels there takes a
    PyTorch path in one mode. A wrong output there is only noted: no reward depends on that mode."""
    inputs = models.make_inputs(ref_module, seed, device)
    new.eval()
    ref.eval()
    try:
        with torch.enable_grad():
            with KernelLaunches(only_file=candidate_file) as seen:
                out = new(*correctness.clone_args(inputs))
                models.sync(device)
            expected = ref(*correctness.clone_args(inputs))
    finally:
        new.train()
        ref.train()
    if not seen.candidate_launches():
        return [("fallback_to_torch", "in eval mode with gradients on, the forward launched none of its kernels: "
                 "it takes a PyTorch path in the mode it is not timed in")]
    try:
        correctness.compare(correctness.flatten(out), correctness.flatten(expected))
    except (correctness.Mismatch, RuntimeError) as m:
        notes.append(f"in eval mode with gradients on the output differs from the reference's: {str(m)[:200]}")
    return []

def determinism_findings(ref, new, ref_module, *, seed: int, device: torch.device, atol: float | None,
                         rtol: float | None, notes: list[str]) -> list[tuple[str, str]]:
    """Two runs on the same inputs. Where the reference gives the same bits twice, the candidate's two
    outputs must both match it: one that passes only some of the time reads memory it never wrote
    (uninitialised shared memory, a freed buffer) or races. Runs that differ but both match (atomics in
    another order) are only noted."""
    inputs = models.make_inputs(ref_module, seed, device)
    with torch.no_grad():
        expected = [correctness.flatten(ref(*correctness.clone_args(inputs))) for _ in range(2)]
        models.sync(device)
        if not all(correctness.same_bits(a, b) for a, b in zip(*expected)):
            return []  # the reference itself varies: nothing to hold the candidate to
        runs = []
        for _ in range(2):
            runs.append(correctness.clone_args(correctness.flatten(new(*correctness.clone_args(inputs)))))
            models.sync(device)
    if all(correctness.same_bits(a, b) for a, b in zip(*runs)):
        return []
    for out in runs:
        try:
            correctness.compare(out, expected[0], atol, rtol)
        except correctness.Mismatch as m:
            return [("reads_uninitialized", f"two runs on the same inputs disagree and one is wrong ({m}): the "
                     "output depends on memory the kernels never wrote, or on a race")]
    notes.append("two runs on the same inputs gave different bits, both within tolerance (e.g. atomics)")
    return []
