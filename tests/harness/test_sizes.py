"""Sizes of a task (drk_lab/harness/sizes.py): constants written as arithmetic, shared or unpacked
assignments, tuples; small sizes derived for tasks that declare none, kept valid on the meta device; a
clear error for a task that cannot be made small; the note on which sizes ran; KernelBench files."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest
import torch

from drk_lab.harness.sizes import SMALL_ELEMENTS, SMALL_FLOPS, derive_small_sizes, meta_cost, meta_run
from drk_lab.harness.task import REPO_DIR, TaskError, load_task, task_from_source

KERNELBENCH = Path(os.environ.get("DRK_KERNELBENCH_DIR", REPO_DIR.parent / "shared" / "kernelbench"))


def make(body: str, name: str = "t"):
    return task_from_source(textwrap.dedent(body), name)


def run_on_cpu(task) -> torch.Tensor:
    """The reference really run on the CPU, as the worker would."""
    namespace = {"__name__": "drk_test_sizes"}
    exec(compile(task.source, "reference.py", "exec"), namespace)
    with torch.no_grad():
        return namespace["Model"](*namespace["get_init_inputs"]())(*namespace["get_inputs"]())


ELEMENTWISE = """
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)


    batch_size = 4096
    dim = 1024 * 384
    axis = 1


    def get_inputs():
        return [torch.randn(batch_size, dim)]


    def get_init_inputs():
        return []
"""

GROUPED_CONV = """
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, kernel_size, groups, num_groups):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, groups=groups)
            self.norm = nn.GroupNorm(num_groups, out_channels)

        def forward(self, x):
            return self.norm(self.conv(x))


    batch_size = 128
    in_channels, out_channels = 64, 128
    kernel_size = 5
    groups = 8
    num_groups = 16
    height = width = 256


    def get_inputs():
        return [torch.randn(batch_size, in_channels, height, width)]


    def get_init_inputs():
        return [in_channels, out_channels, kernel_size, groups, num_groups]
"""


def test_constants_written_as_arithmetic_shared_or_unpacked_are_sizes():
    task = make(GROUPED_CONV.replace("batch_size = 128", "batch_size = 64 * 2"))
    constants = task.constants
    assert (constants["batch_size"], constants["height"], constants["width"]) == (128, 256, 256)
    assert (constants["in_channels"], constants["out_channels"]) == (64, 128)
    resized = task.resized(batch_size=3, in_channels=16, height=32, width=32)
    assert "batch_size = 3\n" in resized.source and "in_channels, out_channels = 16, 128" in resized.source
    assert "height = width = 32" in resized.source
    with pytest.raises(TaskError, match="height and width share one assignment"):
        task.resized(height=32, width=16)


def test_tuple_constants_take_tuples():
    task = make(ELEMENTWISE.replace("dim = 1024 * 384", "input_shape = (1024 * 384,)")
                .replace("torch.randn(batch_size, dim)", "torch.randn(batch_size, *input_shape)"))
    assert task.constants["input_shape"] == (393216,)
    assert task.resized(input_shape=(8,)).constants["input_shape"] == (8,)
    with pytest.raises(TaskError, match="input_shape"):
        task.resized(input_shape=8)


def test_derived_sizes_fit_the_budget_and_keep_the_rest():
    task = make(ELEMENTWISE)
    small = task.small()
    assert set(small.full_sizes) == {"batch_size", "dim"}  # axis = 1 is no size
    assert small.constants["axis"] == 1
    cost = meta_cost(small.source)
    assert cost.elements <= SMALL_ELEMENTS and cost.stage == 3
    assert small.size_note() == (f"sizes batch_size={small.constants['batch_size']}, dim={small.constants['dim']} "
                                 "(small sizes derived for the CPU; full size batch_size=4096, dim=393216)")
    assert run_on_cpu(small).shape == (small.constants["batch_size"], small.constants["dim"])
    assert small.small().source == small.source  # already small: nothing more to do


def test_derived_sizes_keep_the_references_own_constraints():
    task = make(GROUPED_CONV)
    small = task.small()
    c = small.constants
    assert (c["kernel_size"], c["groups"]) == (5, 8)  # under 16: never derived
    assert c["in_channels"] % c["groups"] == 0 and c["out_channels"] % c["groups"] == 0
    assert c["out_channels"] % c["num_groups"] == 0
    assert c["height"] == c["width"] >= c["kernel_size"]
    cost = meta_cost(small.source)
    assert cost.elements <= SMALL_ELEMENTS and cost.flops <= SMALL_FLOPS
    assert meta_run(small.source) is None
    out = run_on_cpu(small)
    assert out.shape == (c["batch_size"], c["out_channels"], c["height"] - 4, c["width"] - 4)


def test_a_task_too_big_even_at_its_smallest_shape_gets_a_clear_error():
    huge = ELEMENTWISE.replace("""        def forward(self, x):
            return torch.relu(x)""", """        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(32768, 32768)  # 4 GiB of weights, whatever the sizes

        def forward(self, x):
            return self.proj(x[:, :32768])""")
    task = make(huge, "huge")
    with pytest.raises(TaskError) as info:
        task.small()
    message = str(info.value)
    assert message.startswith("huge: cannot be made small enough for the CPU: at batch_size=1, dim=")
    assert "GiB" in message and "\n" not in message


def test_a_model_the_meta_device_cannot_build_only_loses_batch():
    item = ELEMENTWISE.replace("""        def forward(self, x):""", """        def __init__(self):
            super().__init__()
            # as Swin's drop-path rates, .item() of a fresh tensor: not on meta. (Not torch.linspace: once
            # transformers has loaded a model in the process, the meta device no longer catches it.)
            self.rate = torch.zeros(4)[1].item()

        def forward(self, x):""")
    derived = derive_small_sizes(textwrap.dedent(item))
    assert list(derived.sizes) == ["batch_size"] and derived.cost.stage == 1
    assert "only the batch" in make(item).small().size_note()


def test_declared_small_sizes_win(tasks):
    relu = tasks["level1/01_relu"]
    small = relu.small()
    assert small.constants["batch_size"] == relu.small_sizes["batch_size"]
    assert small.size_note() == "sizes batch_size=7, dim=100 (the task's SMALL_SIZES; full size batch_size=8192, dim=8192)"


@pytest.fixture(scope="module")
def kb() -> Path:
    if not KERNELBENCH.is_dir():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH} (set DRK_KERNELBENCH_DIR)")
    return KERNELBENCH


@pytest.mark.parametrize("name, check", [
    ("level1/19_ReLU.py", lambda c: c["batch_size"] * c["dim"] <= SMALL_ELEMENTS),
    ("level1/100_HingeLoss.py", lambda c: c["input_shape"] == (c["batch_size"],)),  # they must stay equal
    ("level1/1_Square_matrix_multiplication_.py", lambda c: c["N"] < 4096),  # N = 2048 * 2
    ("level2/11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm.py",
     lambda c: c["out_channels"] % c["num_groups"] == 0 and c["kernel_size"] == 5),
    ("level3/43_MinGPTCausalAttention.py", lambda c: c["seq_len"] <= c["max_seqlen"] and c["n_embd"] % c["n_head"] == 0),
])
def test_kernelbench_derived_sizes_run_on_the_cpu(kb, name, check):
    task = load_task(kb / name)
    small = task.small()
    assert small.full_sizes and check(small.constants), small.constants
    assert meta_cost(small.source).elements <= SMALL_ELEMENTS
    run_on_cpu(small)
