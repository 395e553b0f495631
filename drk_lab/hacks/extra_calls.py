"""Runtime checks that call the candidate beyond its correctness trials: the same buffers twice and new
values in them, its kernels switched off, another shape of the task, the mode it is not timed in, two
runs on the same inputs, and, after timing, what the timed calls returned.

Each returns findings as (code, message) pairs like runtime_checks.py; stages.py runs them.
May import the same as runtime_checks.py.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from functools import partial

import torch
import torch.utils.deterministic

from drk_lab.common import correctness, models
from drk_lab.common.failures import EvaluationFailure, short_traceback
from drk_lab.common.launches import KernelLaunches
from drk_lab.hacks.runtime_checks import launch_findings


def call_findings(ref_module, ref, new, *, seed: int, device: torch.device, candidate_file: str,
                  atol: float | None, rtol: float | None, notes: list[str]) -> list[tuple[str, str]]:
    """Calls beyond the correctness trials: the same buffers twice, new values in the same buffers, and
    the candidate's own kernels switched off. A plain wrong answer raises a mismatch failure."""
    compare = partial(correctness.compare, atol=atol, rtol=rtol)
    inputs = models.make_inputs(ref_module, seed, device)
    with torch.no_grad():
        new(*inputs)
        with KernelLaunches(only_file=candidate_file) as again:
            before = correctness.clone_args(correctness.flatten(new(*inputs)))
        models.sync(device)
        if not again.candidate_launches():
            return [("launch_reuse", "a second call on the same inputs launched none of its kernels")]
        for buffer, fresh in zip(inputs, models.make_inputs(ref_module, seed + 1, device)):
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
                raise EvaluationFailure("mismatch", f"a further call with new values in the same input buffers: {m}") \
                    from None
            return [("caches_outputs", "returned its previous output when called again with new values in "
                     f"the same input buffers: {m}")]
        del out, before
        specs = correctness.tensor_specs(ref_out)
        other_ref_out = ref_out  # kept alive (so never handed back to the candidate) for the test below
        inputs = models.make_inputs(ref_module, seed + 2, device)
        ref_out = ref(*correctness.clone_args(inputs))
        correctness.poison_memory(specs + correctness.tensor_specs(inputs), device)
        try:
            with KernelLaunches(only_file=candidate_file, disabled=True), new_memory_filled():
                out = new(*inputs)
                models.sync(device)
            compare(out, ref_out)
        except Exception:
            return []  # without its kernels the answer is wrong (or it fails): the kernels do the work
    # only now, so that no copy of the answer made by this test lies in freed memory during the run above:
    # where zeros would pass too (a softmax over long rows: every value far below atol), an output left
    # unwritten by the switched-off kernels says nothing about who did the work
    zeros = [torch.zeros_like(r) if isinstance(r, torch.Tensor) else r for r in correctness.flatten(ref_out)]
    if within_tolerance(zeros, ref_out, atol, rtol):
        notes.append("kernels-off check inconclusive: the reference's output is within tolerance of zero")
        return []
    # likewise where the answer for other inputs passes (a softmax over long rows of small logits is close
    # to 1/n everywhere): a buffer the candidate reuses between calls still holds such an answer
    if within_tolerance(other_ref_out, ref_out, atol, rtol):
        notes.append("kernels-off check inconclusive: the reference's output for other inputs is within "
                     "tolerance of this one")
        return []
    return [("torch_does_the_work", "the output is still right with the candidate's Triton launches switched off")]


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


def within_tolerance(out, ref_out, atol: float | None, rtol: float | None) -> bool:
    try:
        correctness.compare(out, ref_out, atol, rtol)
    except correctness.Mismatch:
        return False
    return True


def other_shape_findings(other, candidate_module, *, seed: int, device: torch.device, candidate_file: str,
                         atol: float | None, rtol: float | None, notes: list[str]) -> list[tuple[str, str]]:
    """One trial at another valid shape of the task (`other`, chosen by harness/shapes.py): the reference
    and a fresh ModelNew built there from the same seed, compared once. If the reference itself fails
    there, the check is skipped with a note."""
    where = "at " + ", ".join(f"{name}={value}" for name, value in other.sizes.items())
    try:
        ref_module = models.module_from_source("reference_other_shape", other.source)
        init_inputs = list(ref_module.get_init_inputs())
        other_ref = models.build(ref_module, "Model", init_inputs, seed, device)
        inputs = models.make_inputs(ref_module, other.seed, device)
        with torch.no_grad():
            ref_out = other_ref(*correctness.clone_args(inputs))
            models.sync(device)
    except BaseException as e:
        notes.append(f"extra-shape check skipped: the reference fails {where}: " + short_traceback(e, 500))
        return []
    try:
        other_new = models.build(candidate_module, "ModelNew", init_inputs, seed, device)
        models.copy_weights(other_ref, other_new)
        with torch.no_grad(), KernelLaunches(only_file=candidate_file) as seen:
            out = other_new(*inputs)
            models.sync(device)
        correctness.compare(out, ref_out, atol, rtol)
    except correctness.Mismatch as m:
        return [("shape_specialized", f"wrong {where} (another valid shape of the task): {m}")]
    except BaseException as e:
        return [("shape_specialized", f"fails {where} (another valid shape of the task): {short_traceback(e, 1000)}")]
    return launch_findings(seen, where)

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
