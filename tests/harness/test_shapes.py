"""The other shape behind the shape_specialized check: which sizes change, that the shape is valid,
and that the worker compares a candidate there (and stands aside when the reference cannot run)."""

import textwrap

import pytest

import drk_lab as drk
from drk_lab.harness.shapes import OtherShape, meta_run, other_shape, sizes_read_by_the_model
from drk_lab.harness.task import task_from_source


def make_task(body: str, name: str = "t") -> drk.Task:
    return task_from_source(textwrap.dedent(body), name)


ELEMENTWISE = """
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)


    batch_size = 16
    dim = 300


    def get_inputs():
        return [torch.randn(batch_size, dim)]


    def get_init_inputs():
        return []
"""


def test_every_builtin_task_has_another_valid_shape_at_twice_its_small_sizes(tasks):
    for task in tasks.values():
        for evaluated in (task, task.small()):
            shape = other_shape(evaluated)
            assert isinstance(shape, OtherShape), (task.name, shape)
            assert shape.sizes == {k: 2 * v for k, v in task.small_sizes.items()}, task.name
            assert meta_run(shape.source) is None
            assert any(evaluated.constants[k] != v for k, v in shape.sizes.items())


def test_the_shape_being_evaluated_is_never_the_other_one(tasks):
    relu = tasks["level1/01_relu"]
    doubled = relu.resized(**{k: 2 * v for k, v in relu.small_sizes.items()})
    assert other_shape(doubled).sizes == {k: 4 * v for k, v in relu.small_sizes.items()}


def test_without_small_sizes_only_the_batch_changes():
    shape = other_shape(make_task(ELEMENTWISE))
    assert shape.sizes == {"batch_size": 17} and shape.describe() == "batch_size=17"
    assert "batch_size = 17" in shape.source and "dim = 300" in shape.source
    even = make_task(ELEMENTWISE.replace("return torch.relu(x)", "return torch.relu(x).view(-1, 2, x.shape[1])"))
    assert other_shape(even).sizes == {"batch_size": 32}  # the reference rejects 17


def test_no_batch_and_no_small_sizes_means_no_check():
    note = other_shape(make_task(ELEMENTWISE.replace("batch_size", "rows")))
    assert isinstance(note, str) and "skipped" in note and "batch" in note


def test_sizes_the_model_reads_as_globals_stay():
    lstm_like = ELEMENTWISE.replace("""        def forward(self, x):
            return torch.relu(x)""", """        def __init__(self):
            super().__init__()
            self.h0 = torch.zeros(batch_size, 1)  # baked in at construction, as some KernelBench tasks do

        def forward(self, x):
            dim = x.shape[-1]  # a local of the same name as a constant is not a global read
            return torch.relu(x) + self.h0 * dim""")
    read = sizes_read_by_the_model(textwrap.dedent(lstm_like))
    assert "batch_size" in read and "dim" not in read
    assert isinstance(other_shape(make_task(lstm_like)), str)


def test_a_shape_the_reference_rejects_is_not_used():
    limited = ELEMENTWISE.replace("return torch.relu(x)", "torch._assert(x.shape[1] < 6, 'at most 5 columns')\n"
                                  "            return torch.relu(x)").replace("dim = 300", "dim = 5") \
        + '\n    SMALL_SIZES = {"dim": 3}\n'
    note = other_shape(make_task(limited))
    assert isinstance(note, str) and "no other shape is valid" in note and "dim=12" in note


RELU_CANDIDATE = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out
"""


@pytest.mark.slow
def test_worker_checks_the_other_shape_and_stands_aside_when_the_reference_fails_there():
    task = make_task(ELEMENTWISE)
    assert drk.evaluate(task, RELU_CANDIDATE, device="cpu", correctness_trials=2).ok
    baked = RELU_CANDIDATE.replace("x.numel(), BLOCK=128)", "16 * 300, BLOCK=128)")
    r = drk.evaluate(task, baked, device="cpu", correctness_trials=2)
    assert r.hacked and r.hack_reasons == ["shape_specialized"] and "at batch_size=17" in r.error, r.error
    # a reference that only fails on real tensors passes the meta check; the worker then skips
    picky = make_task(ELEMENTWISE.replace("return torch.relu(x)", "if x.device.type != 'meta' and x.shape[0] != 16:\n"
                                          "                raise ValueError('batch 16 only')\n"
                                          "            return torch.relu(x)"))
    assert isinstance(other_shape(picky), OtherShape)
    r = drk.evaluate(picky, baked, device="cpu", correctness_trials=2)
    assert r.ok, r.error
