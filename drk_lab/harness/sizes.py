"""A task's sizes: its module-level constants, its source with some of them replaced, a dry run on the
meta device, what one call of the reference costs, and small sizes derived for a task that declares
none (KernelBench files), so that the CPU interpreter path can run it.

Derived small sizes: the int constants that look like sizes (a batch constant, or any int of 16 or
more: kernel sizes, strides, paddings, dilations, groups and axes are smaller and stay) are halved,
all together while that keeps the task valid, else one at a time from the largest, until the inputs,
outputs and weights of one call fit SMALL_ELEMENTS and its FLOPs SMALL_FLOPS. Halving every size
together keeps their ties (channels by groups, embedding by heads, sequence by block length, a
sequence below its maximum); a proposal is kept only when the reference still builds and runs on the
meta device (no memory, no compute), where PyTorch applies the reference's own constraints (channels
divisible by groups, a kernel no larger than its padded input, a pooled output of at least one) and
the reference's own asserts run. Where the meta device cannot run the reference through forward (a
Model that calls .item() while it is built), only a batch constant is halved. Tasks are trusted code,
run here as task.check_source runs them.
"""

from __future__ import annotations

import ast
import functools
import operator
from dataclasses import dataclass, field

from drk_lab.harness.syntax import parse

BATCH_NAMES = ("batch_size", "batch", "bs", "B", "BATCH_SIZE", "BATCH")
MIN_SCALABLE = 16  # smaller ints are kernel sizes, strides, paddings, groups, axes: never derived
SMALL_ELEMENTS = 1 << 18  # inputs + outputs + weights of one call (1 MiB of fp32)
SMALL_FLOPS = 1 << 28  # of one call (about 0.27 GFLOP)
SAVING = 0.9  # a step must cut the elements or the FLOPs of a call by at least 10%
# Above either, even at its smallest valid shape, a task is refused on the CPU path. A worker holds about
# three times a call's tensors (reference and candidate, inputs and outputs) under a host-memory limit of
# half the memory available; a TFLOP is about 7 s a call for the reference on two cores (VGG19's 39
# GFLOP take 0.27 s), so with the trials and checks an evaluation would pass its time limit.
LIMIT_BYTES = 2 << 30
LIMIT_FLOPS = 1e12

_ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.LShift: operator.lshift}


def literal(node: ast.expr):
    """A literal, or int arithmetic on literals (KernelBench writes `N = 2048 * 2`); ValueError if not."""
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC:
        left, right = literal(node.left), literal(node.right)
        if type(left) is not int or type(right) is not int:
            raise ValueError("not int arithmetic")
        if isinstance(node.op, (ast.Pow, ast.LShift)) and not 0 <= right <= 64:
            raise ValueError("exponent out of range")  # never compute a huge number
        return _ARITHMETIC[type(node.op)](left, right)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [literal(item) for item in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    return ast.literal_eval(node)


def module_constants(tree: ast.Module) -> dict[str, tuple[object, ast.expr]]:
    """Module-level constants: name -> (value, the value's node). `a = 1`, `a: int = 1`, `a = b = 1` (both
    names share one node) and `a, b = 1, 2` (each name its element's node)."""
    constants = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            pairs = [pair for target in stmt.targets for pair in _bound(target, stmt.value)]
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            pairs = _bound(stmt.target, stmt.value)
        else:
            continue
        for name, node in pairs:
            try:
                constants[name] = (literal(node), node)
            except (ValueError, TypeError, SyntaxError, RecursionError, ZeroDivisionError, OverflowError):
                constants.pop(name, None)  # a later assignment that is not a literal hides an earlier one
    return constants


def _bound(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if (isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
            and all(isinstance(t, ast.Name) for t in target.elts)):
        return [(t.id, v) for t, v in zip(target.elts, value.elts)]
    return []


def is_ints(value) -> bool:
    """An int, or a tuple or list of ints (not bools): what Task.resized can change."""
    if isinstance(value, (tuple, list)):
        return all(type(v) is int for v in value)
    return type(value) is int


def replace_nodes(source: str, edits: list[tuple[ast.expr, str]]) -> str:
    data = source.encode()
    offsets = [0]  # byte offset of each line start; ast counts lines at \n only
    for line in data.split(b"\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    spans = []
    for node, text in edits:
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        spans.append((start, end, text.encode()))
    for start, end, text in sorted(spans, reverse=True):
        data = data[:start] + text + data[end:]
    return data.decode()


def resize_source(source: str, sizes: dict[str, object]) -> str:
    """The source with constants replaced by ints or tuples/lists of ints (Task.resized checks names and
    types first). Names that share one value (`height = width = 256`) must get the same new value."""
    found = module_constants(parse(source))
    edits: dict[tuple[int, int], tuple[ast.expr, str, str]] = {}
    for name, value in sizes.items():
        node = found[name][1]
        text = repr(tuple(value)) if isinstance(value, tuple) else repr(value)
        where = (node.lineno, node.col_offset)
        if where in edits and edits[where][1] != text:
            raise ValueError(f"{edits[where][2]} and {name} share one assignment: give them the same value")
        edits[where] = (node, text, name)
    return replace_nodes(source, [(node, text) for node, text, _ in edits.values()])


def describe(sizes: dict[str, object]) -> str:
    return ", ".join(f"{name}={value}" for name, value in sizes.items())


def meta_run(source: str) -> str | None:
    """None when the task's inputs, Model and forward all work on the meta device; else what failed."""
    cost = meta_cost(source)
    return cost.problem if cost.problem else None


@dataclass
class Cost:
    """One call of the reference, measured on the meta device (nothing allocated, nothing computed)."""

    elements: int = 0  # inputs + outputs + weights
    bytes: int = 0
    flops: int = 0  # matmuls and convolutions, as torch.utils.flop_counter counts them
    stage: int = 0  # how far it got: 1 inputs, 2 Model built, 3 forward ran
    problem: str | None = None  # what failed at the next stage
    parts: dict = field(default_factory=dict)

    @property
    def small(self) -> bool:
        return self.elements <= SMALL_ELEMENTS and self.flops <= SMALL_FLOPS

    @property
    def too_big(self) -> bool:
        return self.bytes > LIMIT_BYTES or self.flops > LIMIT_FLOPS

    def describe(self) -> str:
        return f"{_bytes(self.bytes)} of inputs, outputs and weights and {self.flops / 1e9:.3g} GFLOP per call"


def _bytes(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def meta_cost(source: str, forward: bool = True) -> Cost:
    """What one call of the task's reference costs, or as far as it got (`stage`, `problem`); with
    forward=False only the inputs and weights."""
    import torch
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    cost = Cost()
    namespace = {"__name__": "drk_task_sizes"}
    step = "executing the module"
    try:
        exec(compile(source, "reference.py", "exec"), namespace)
        with torch.device("meta"), torch.no_grad():
            step = "get_init_inputs()"
            init_inputs = list(namespace["get_init_inputs"]())
            step = "get_inputs()"
            inputs = list(namespace["get_inputs"]())
            cost.stage = 1
            _count(cost, "inputs", tree_leaves(inputs))
            step = "building Model"
            model = namespace["Model"](*init_inputs)
            cost.stage = 2
            _count(cost, "weights", list(model.parameters()) + list(model.buffers()))
            if not forward:
                return cost
            step = "forward"
            with FlopCounterMode(display=False) as counter:
                output = model(*inputs)
            cost.stage, cost.flops = 3, counter.get_total_flops()
            _count(cost, "outputs", tree_leaves(output))
    except Exception as e:
        cost.problem = f"{step} raised {type(e).__name__}: {str(e)[:200]}"
    return cost


def _count(cost: Cost, part: str, values) -> None:
    import torch

    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    cost.parts[part] = sum(t.numel() for t in tensors)
    cost.elements += cost.parts[part]
    cost.bytes += sum(t.numel() * t.element_size() for t in tensors)


def _halved(name: str, value, original):
    """The next smaller value of a size constant, or None when it cannot go lower. An int halves down to 2
    (a batch down to 1); a tuple or list halves the elements that were sizes to begin with."""
    if type(value) is int:
        return value // 2 if value // 2 >= (1 if name in BATCH_NAMES else 2) else None
    new = [v // 2 if o >= MIN_SCALABLE and v // 2 >= 2 else v for v, o in zip(value, original)]
    return (tuple(new) if isinstance(value, tuple) else new) if new != list(value) else None


def _scalable(name: str, value) -> bool:
    if type(value) is int:
        return value >= MIN_SCALABLE or (name in BATCH_NAMES and value > 1)
    return is_ints(value) and any(v >= MIN_SCALABLE for v in value)


@dataclass
class Derived:
    sizes: dict[str, object]  # the constants changed, with their small values
    cost: Cost  # of one call at those sizes

    @property
    def fits(self) -> bool:
        return self.cost.small


def derive_small_sizes(source: str) -> Derived:
    """Small sizes for a task's source (the module docstring says how); cached per source."""
    return _derive(source)


@functools.lru_cache(maxsize=512)
def _derive(source: str) -> Derived:
    tree = parse(source)
    constants = module_constants(tree)
    original = {name: value for name, (value, _) in constants.items() if _scalable(name, value)}
    shared: dict[tuple, list[str]] = {}  # names bound to one value node change together
    for name in original:
        node = constants[name][1]
        shared.setdefault((node.lineno, node.col_offset), []).append(name)
    units = list(shared.values())
    sizes, cost, stage = _probe(source, original, units)
    if stage < 3:  # forward cannot be checked here, so sizes may be tied in ways only a real run shows
        units = [unit for unit in units if all(name in BATCH_NAMES for name in unit)]
    while not cost.small:
        movable = [u for u in units if _halved(u[0], sizes[u[0]], original[u[0]]) is not None]
        step = _halve(source, sizes, original, movable, cost, stage) if len(movable) > 1 else None
        for unit in (sorted(movable, key=lambda u: -_largest(sizes[u[0]])) if step is None else ()):
            step = _halve(source, sizes, original, [unit], cost, stage)
            if step is not None:
                break
            units.remove(unit)  # it cannot go lower, or it saves nothing: leave it from now on
        if step is None:
            break
        sizes, cost = step
    return Derived({k: v for k, v in sizes.items() if v != original[k]}, cost)


def _largest(value) -> int:
    return value if type(value) is int else max(value)


def _probe(source: str, original: dict, units: list) -> tuple[dict, Cost, int]:
    """A quick first cut: halve every size together while the inputs and weights alone are over the
    budget and the Model still builds, without running forward (on the meta device an LSTM's forward
    takes seconds, so a full-size forward would dominate). Kept when the forward then runs; otherwise
    the careful steps start from the task's own sizes. Returns (sizes, cost, the stage to keep)."""
    sizes, light = dict(original), meta_cost(source, forward=False)
    while light.elements > SMALL_ELEMENTS and light.stage == 2:
        step = {n: _halved(n, sizes[n], original[n]) for u in units for n in u}
        step = {**sizes, **{n: v for n, v in step.items() if v is not None}}
        new = _measure(source, step, forward=False)
        if step == sizes or new is None or new.stage < 2:
            break
        sizes, light = step, new
    cost = _measure(source, sizes) if sizes != original else None
    if cost is not None and cost.stage == 3:
        return sizes, cost, 3
    cost = meta_cost(source)
    return dict(original), cost, cost.stage


def _measure(source: str, sizes: dict, forward: bool = True) -> Cost | None:
    try:
        return meta_cost(resize_source(source, sizes), forward=forward)
    except ValueError:
        return None


def _halve(source: str, sizes: dict, original: dict, units: list, cost: Cost, stage: int):
    """(sizes, cost) with `units` halved, if the task still gets as far on the meta device (`stage`) and
    one call costs clearly less; else None."""
    proposal = dict(sizes)
    for unit in units:
        for name in unit:
            proposal[name] = _halved(name, sizes[name], original[name])
    new = _measure(source, proposal)
    if new is None or new.stage < stage or new.elements > cost.elements or new.flops > cost.flops:
        return None
    # A step that saves little (a 3x3 image into a ResNet whose weights are the cost) only degrades the task.
    if new.elements > SAVING * cost.elements and new.flops > SAVING * cost.flops:
        return None
    return proposal, new
