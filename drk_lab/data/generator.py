"""New KernelBench-format tasks composed from the vocabulary (operators.py), validated and deduplicated.

    tasks = generate_tasks(100, seed=0)          # [GeneratedTask(spec, task)], deterministic given the seed
    specs = sample_specs(10000, seed=1)          # [TaskSpec], not validated: pretraining text only

Level 1: one operator alone (an activation, a row normalisation or reduction, a linear layer, a conv).
Level 2: a linear layer or conv followed by 1-3 pointwise, bias or residual steps, and for a linear
layer sometimes a row operator at the end.

Full sizes are large enough for meaningful GPU timings (an input of 8 MB or more (64 MB or more for pointwise and row tasks at fp32), up to 2^36 FLOPs);
small sizes (SMALL_SIZES) keep a call under a few thousand elements for the interpreter. A candidate
task is kept when (validate):
- the module runs on the meta device at full size (task_from_source) and on the CPU at small size;
- its output is finite, depends on its input (two inputs give different outputs) and is not near-constant
  (a spread and many distinct values);
- at fp16/bf16 it agrees with the same computation in fp32 within half the harness's tolerance, so an
  exact kernel passes the correctness check (a chain that amplifies rounding is dropped);
- no task with the same operator graph and sizes (TaskSpec.key) was kept before.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from drk_lab.data.operators import ACTIVATIONS, DTYPES, POINTWISE, ROW, op
from drk_lab.data.spec import TaskSpec, render_source
from drk_lab.harness.task import Task, TaskError, task_from_source

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
MIN_INPUT_BYTES = 8 << 20
MAX_FLOPS = 2 ** 36
LEVEL1_KINDS = (("activation", 0.4), ("row", 0.4), ("linear", 0.1), ("conv", 0.1))


@dataclass
class GeneratedTask:
    spec: TaskSpec
    task: Task  # full size, SMALL_SIZES declared

    @property
    def name(self) -> str:
        return self.spec.name


def _with_param(rng: random.Random, name: str) -> str:
    params = op(name).params
    return f"{name}:{rng.choice(params)}" if params else name


def _weighted(rng: random.Random, pairs) -> str:
    return rng.choices([p for p, _ in pairs], weights=[w for _, w in pairs])[0]


def sample_chain(rng: random.Random, head: str) -> tuple[str, ...]:
    """1-3 pointwise, bias or residual steps (no op twice in a row, at most one bias and one residual,
    the residual never first); after a linear layer, a row operator at the end half of the time."""
    steps: list[str] = []
    for _ in range(rng.randint(1, 3)):
        used = {s.partition(":")[0] for s in steps}
        choices = [n for n in POINTWISE if not steps or n != steps[-1].partition(":")[0]]
        choices += [n for n in ("bias", "residual") if n not in used and (n != "residual" or steps)]
        steps.append(_with_param(rng, rng.choice(choices)))
    if head == "linear" and rng.random() < 0.5:
        steps.append(rng.choice(tuple(ROW)))
    return tuple(steps)


def _none_sizes(rng: random.Random, row: bool, dtype: str):
    dim = rng.choice((512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192) if row else
                     (1024, 2048, 4096, 8192, 16384, 3072, 12288))
    total = rng.choice((2 ** 24, 2 ** 25, 2 ** 26, 2 ** 27))
    total = max(total, MIN_INPUT_BYTES // BYTES[dtype])
    rows = max(16, total // dim)
    small_dim = rng.choice((37, 48, 64, 80, 100, 130) if row else (53, 96, 128, 200))
    if rng.random() < 0.5:
        seq = rng.choice((128, 256, 512, 1024))
        return ((("batch_size", max(1, rows // seq)), ("seq_len", seq), ("dim", dim)),
                (("batch_size", rng.choice((2, 3))), ("seq_len", rng.choice((5, 7))), ("dim", small_dim)))
    return (("batch_size", rows), ("dim", dim)), (("batch_size", rng.choice((7, 13, 19))), ("dim", small_dim))


def _linear_sizes(rng: random.Random, dtype: str):
    while True:
        m, k, n = (rng.choice((1024, 2048, 4096, 8192)), rng.choice((512, 1024, 2048, 4096, 8192)),
                   rng.choice((512, 1024, 2048, 4096, 8192)))
        limit = MAX_FLOPS // (2 if dtype == "float32" else 1)
        if 2 * m * n * k <= limit and m * k * BYTES[dtype] >= MIN_INPUT_BYTES:
            break
    small = (("in_features", rng.choice((24, 40, 48, 64))), ("out_features", rng.choice((40, 72, 80, 96))))
    if rng.random() < 0.3:
        seq = rng.choice((128, 256, 512))
        return ((("batch_size", m // seq), ("seq_len", seq), ("in_features", k), ("out_features", n)),
                (("batch_size", 3), ("seq_len", rng.choice((5, 7)))) + small)
    return (("batch_size", m), ("in_features", k), ("out_features", n)), (("batch_size", rng.choice((13, 29, 37))),) + small


def _conv_sizes(rng: random.Random, dtype: str, kernel_size: int):
    while True:
        n, cin, cout = rng.choice((8, 16, 32)), rng.choice((16, 32, 64, 128)), rng.choice((32, 64, 128, 256))
        h, w = rng.choice((28, 32, 56, 64, 112, 128)), rng.choice((28, 32, 56, 64, 112, 128))
        flops = 2 * n * cout * h * w * cin * kernel_size ** 2
        if flops <= MAX_FLOPS and n * cin * h * w * BYTES[dtype] >= MIN_INPUT_BYTES:
            break
    return ((("batch_size", n), ("in_channels", cin), ("out_channels", cout), ("height", h), ("width", w)),
            (("batch_size", 2), ("in_channels", rng.choice((3, 8, 12))), ("out_channels", rng.choice((16, 24, 40))),
             ("height", rng.choice((5, 7, 9))), ("width", rng.choice((6, 8, 12)))))


def sample_spec(rng: random.Random, level: int) -> TaskSpec:
    if level == 1:
        kind = _weighted(rng, LEVEL1_KINDS)
        head = kind if kind in ("linear", "conv") else None
        steps = () if head else (_with_param(rng, rng.choice(ACTIVATIONS if kind == "activation" else tuple(ROW))),)
    else:
        head = "linear" if rng.random() < 0.6 else "conv"
        steps = sample_chain(rng, head)
    # conv tasks are fp16 only: cuDNN runs fp32 convs in TF32 by default, so an exact fp32 kernel would
    # miss the reference by more than the fp32 tolerance. No bf16 head: Triton's interpreter multiplies
    # bf16 tiles as raw 16-bit integers in tl.dot, so the CPU path could not check those tasks' kernels.
    dtype = rng.choice({"conv": ("float16",), "linear": ("float32", "float16")}.get(head, DTYPES))
    kernel_size = 0
    if head == "linear":
        sizes, small = _linear_sizes(rng, dtype)
    elif head == "conv":
        kernel_size = rng.choice((1, 3))
        sizes, small = _conv_sizes(rng, dtype, kernel_size)
    else:
        sizes, small = _none_sizes(rng, bool(steps) and steps[0] in ROW, dtype)
    return TaskSpec(level, head, steps, dtype, sizes, small, kernel_size)


class InvalidTask(ValueError):
    """A candidate task that fails validation (the message says which check)."""


def _run_small(source: str, seed_inputs: int, fp32: bool = False):
    import torch

    namespace: dict = {"__name__": "drk_generated_task"}
    exec(compile(source, "<generated task>", "exec"), namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(seed_inputs)
    inputs = namespace["get_inputs"]()
    if fp32:
        model, inputs = model.float(), [x.float() for x in inputs]
    with torch.no_grad():
        return model(*inputs)


def validate(spec: TaskSpec) -> Task:
    """The spec's task at full size, or InvalidTask naming the check it fails (module docstring)."""
    import torch

    from drk_lab.common.correctness import TOLERANCES, Mismatch, compare

    try:
        task = task_from_source(render_source(spec), spec.name, spec.level)
    except TaskError as e:
        raise InvalidTask(f"does not build at full size: {e}") from None
    small = task.small().source
    try:
        first, second = _run_small(small, 1), _run_small(small, 2)
    except Exception as e:  # a task is trusted code; any error means this spec is unusable
        raise InvalidTask(f"does not run at small size: {type(e).__name__}: {str(e)[:200]}") from None
    values = first.double()
    if not bool(values.isfinite().all()):
        raise InvalidTask("the output is not finite")
    if torch.equal(first, second):
        raise InvalidTask("the output does not depend on the input")
    spread = float(values.std()) if values.numel() > 1 else 0.0
    if spread <= 1e-3 * (float(values.abs().mean()) + 1e-12) or values.unique().numel() < max(2, values.numel() // 20):
        raise InvalidTask("the output is near-constant")
    if spec.dtype != "float32":
        tol = TOLERANCES[first.dtype] / 2
        try:
            compare(first, _run_small(small, 1, fp32=True).to(first.dtype), atol=tol, rtol=tol)
        except Mismatch as e:
            raise InvalidTask(f"rounding at {spec.dtype} moves it beyond half the tolerance ({e})") from None
    return task


def generate_tasks(n: int, seed: int = 0, level1_share: float = 0.25, progress: bool = True,
                   max_attempts: int | None = None, rejected: dict | None = None) -> list[GeneratedTask]:
    """`n` distinct valid tasks, about `level1_share` of them level 1. Deterministic given the seed.
    `rejected` (a dict) collects how many candidates each check turned away."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[GeneratedTask] = []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, desc="tasks", unit="task")
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > (max_attempts or 20 * n + 100):
            raise RuntimeError(f"only {len(out)} of {n} valid distinct tasks after {attempts - 1} candidates")
        spec = sample_spec(rng, 1 if rng.random() < level1_share else 2)
        if spec.key in seen:
            _count(rejected, "duplicate")
            continue
        seen.add(spec.key)
        try:
            task = validate(spec)
        except InvalidTask as e:
            _count(rejected, str(e).split(" (")[0].split(":")[0])
            continue
        out.append(GeneratedTask(spec, task))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def sample_specs(n: int, seed: int, keep=None, level1_share: float = 0.25) -> list[TaskSpec]:
    """`n` distinct specs (by TaskSpec.key) that `keep(spec)` accepts, drawn as generate_tasks draws them
    but not validated (no module is run, so thousands take a second): text for pretraining, where the
    teacher's reply is right whatever the task's numerics. Tasks to evaluate come from generate_tasks."""
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[TaskSpec] = []
    for _ in range(50 * n + 100):
        if len(out) == n:
            break
        spec = sample_spec(rng, 1 if rng.random() < level1_share else 2)
        if spec.key not in seen and (keep is None or keep(spec)):
            out.append(spec)
        seen.add(spec.key)
    return out


def _count(rejected: dict | None, reason: str) -> None:
    if rejected is not None:
        rejected[reason] = rejected.get(reason, 0) + 1
