"""Generated tasks: valid (they load, run at small size, depend on their input), distinct, deterministic given
the seed; the held-out split shares no operator combination with training."""

import pytest
import torch

from drk_lab.data.export import rl_rows
from drk_lab.data.generator import InvalidTask, generate_tasks, validate
from drk_lab.data.spec import TaskSpec, input_shape
from drk_lab.data.splits import combinations_by_split, split_of
from drk_lab.harness.task import task_from_source

N = 40


@pytest.fixture(scope="module")
def generated():
    return generate_tasks(N, seed=11, progress=False)


def run_small(task, seed):
    namespace = {}
    exec(task.small().source, namespace)
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(*namespace["get_inputs"]())


def test_generated_tasks_are_valid_and_distinct(generated):
    assert len(generated) == N
    assert len({g.spec.key for g in generated}) == N and len({g.task.source for g in generated}) == N
    assert {g.spec.level for g in generated} == {1, 2}
    assert {g.spec.head for g in generated} == {None, "linear", "conv"}
    for g in generated:
        reloaded = task_from_source(g.task.source, g.name, g.spec.level)  # runs on the meta device at full size
        assert reloaded.small_sizes == dict(g.spec.small)
        a, b = run_small(g.task, 1), run_small(g.task, 2)
        assert a.isfinite().all() and not torch.equal(a, b), g.name
        assert a.dtype == getattr(torch, g.spec.dtype)
        # full size: the input alone is 8 MB or more, so a GPU timing means something
        shape = [dict(g.spec.sizes)[n] for n in input_shape(g.spec)]
        assert torch.Size(shape).numel() * a.element_size() >= 8 << 20, g.name
        assert g.spec.ops[0] == (g.spec.head or g.spec.ops[0]) and g.spec.ops, g.name


def test_generation_is_deterministic_given_the_seed(generated):
    again = generate_tasks(10, seed=11, progress=False)
    assert [g.task.source for g in again] == [g.task.source for g in generated[:10]]
    other = generate_tasks(10, seed=12, progress=False)
    assert [g.spec.key for g in other] != [g.spec.key for g in again]


def test_validation_rejects_constant_and_input_independent_tasks():
    sizes = (("batch_size", 4096), ("dim", 4096))
    assert validate(TaskSpec(1, None, ("softmax",), "float32", sizes, (("batch_size", 64), ("dim", 48)))).name
    # a softmax over one element is 1 whatever the input; an L2-normalised single element is +-1
    with pytest.raises(InvalidTask, match="does not depend on the input"):
        validate(TaskSpec(1, None, ("softmax",), "float32", sizes, (("batch_size", 64), ("dim", 1))))
    with pytest.raises(InvalidTask, match="near-constant"):
        validate(TaskSpec(1, None, ("l2norm",), "float32", sizes, (("batch_size", 64), ("dim", 1))))
    with pytest.raises(InvalidTask, match="does not (build at full size|run at small size)"):
        validate(TaskSpec(2, "conv", ("relu",), "float16", (("batch_size", 2), ("in_channels", 3), ("out_channels", 4),
                                                          ("height", 1), ("width", 0)), (("batch_size", 1),), 3))


def test_heldout_shares_no_operator_combination_with_train(generated):
    rows = rl_rows(generated, heldout_fraction=0.3, seed=5)
    combos = combinations_by_split(rows)
    assert combos["train"] and combos["heldout"]
    assert not combos["train"] & combos["heldout"]
    for row in rows:
        assert row["split"] == split_of(row["combination"], 0.3, 5)
        assert row["combination"] == "+".join(sorted(set(row["ops"])))
