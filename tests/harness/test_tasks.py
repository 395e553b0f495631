"""Task loaders (drk_lab/harness/task.py): KernelBench files and folders, the built-in suite, resizing,
malformed sources, data-set rows and serialisation."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
import torch

from drk_lab.harness.task import (
    REPO_DIR,
    Task,
    TaskError,
    builtin_solution,
    builtin_tasks,
    check_source,
    load_task,
    load_task_set,
    load_tasks,
    task_from_row,
    task_from_source,
)

# A KernelBench checkout: $DRK_KERNELBENCH_DIR, by default ../shared/kernelbench beside the repository.
KERNELBENCH = Path(os.environ.get("DRK_KERNELBENCH_DIR", REPO_DIR.parent / "shared" / "kernelbench"))
LEVEL_COUNTS = {1: 100, 2: 100, 3: 50}


@pytest.fixture(scope="module")
def kb() -> Path:
    if not KERNELBENCH.is_dir():
        pytest.skip(f"no KernelBench checkout at {KERNELBENCH} (set DRK_KERNELBENCH_DIR)")
    return KERNELBENCH


@pytest.fixture(scope="module")
def kb_all(kb) -> list[Task]:
    """All 250 KernelBench tasks of levels 1-3, loaded (and checked on the meta device) once for the module.
    A checkout's level4 is left out: its files download models from the Hugging Face hub."""
    return [t for level in sorted(LEVEL_COUNTS) for t in load_tasks(kb / f"level{level}")]


@pytest.fixture(scope="module")
def builtin() -> list[Task]:
    return builtin_tasks()


def _number(task: Task) -> int:
    return int(re.match(r"\d+", task.name).group())


def _run(source: str) -> dict:
    namespace = {"__name__": "drk_test_task"}
    exec(compile(source, "<task>", "exec"), namespace)
    return namespace


def _meta_input_shapes(source: str) -> list[tuple[int, ...]]:
    ns = _run(source)
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
    return [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)]


# A small well-formed task with a mix of constant kinds, used where KernelBench is not needed.
GOOD = '''\
"""A tiny task. Non-ASCII in a docstring: café, naïve, ×."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale  # déjà vu


batch_size = 16  # rows
dim: int = 32
offset = -3
depth = (
    5
)
eps = 1e-5
flag = True
label = "café"
shape = (2, 3)


def get_inputs():
    return [torch.randn(batch_size, dim + offset + depth), torch.randn(*shape)]


def get_init_inputs():
    return [eps]


SMALL_SIZES = {"batch_size": 2, "dim": 8}
'''


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- KernelBench files


def test_load_task_kernelbench_relu(kb):
    path = kb / "level1" / "19_ReLU.py"
    task = load_task(path)
    assert task.name == "19_ReLU"
    assert task.level == 1
    assert task.path == str(path)
    assert task.source == path.read_text()
    assert task.constants == {"batch_size": 4096, "dim": 393216}
    assert task.small_sizes == {}
    small = task.small()  # no SMALL_SIZES: sizes derived from its constants (test_sizes.py)
    assert small.full_sizes == {"batch_size": 4096, "dim": 393216}
    assert small.constants["batch_size"] * small.constants["dim"] <= 1 << 17
    assert small.size_note().startswith("sizes batch_size=") and "derived" in small.size_note()
    assert "class Model(nn.Module)" in task.source
    assert _meta_input_shapes(task.source) == [(4096, 393216)]


def test_load_task_accepts_str_path(kb):
    path = kb / "level1" / "19_ReLU.py"
    assert load_task(str(path)) == load_task(path)


@pytest.mark.parametrize("level", sorted(LEVEL_COUNTS))
def test_load_tasks_kernelbench_level(kb, kb_all, level):
    tasks = load_tasks(kb / f"level{level}")
    assert len(tasks) == LEVEL_COUNTS[level]
    assert [_number(t) for t in tasks] == list(range(1, LEVEL_COUNTS[level] + 1))
    assert all(t.level == level for t in tasks)
    assert all(t.source and t.path and Path(t.path).is_file() for t in tasks)
    # Same tasks, same order, as in the load of the whole folder.
    assert tasks == [t for t in kb_all if t.level == level]


def test_load_tasks_kernelbench_whole(kb_all):
    assert len(kb_all) == sum(LEVEL_COUNTS.values()) == 250
    assert [t.level for t in kb_all] == [1] * 100 + [2] * 100 + [3] * 50
    for level, count in LEVEL_COUNTS.items():
        assert [_number(t) for t in kb_all if t.level == level] == list(range(1, count + 1))
    assert len({(t.level, t.name) for t in kb_all}) == 250


def test_kernelbench_bool_and_float_constants_not_resizable(kb):
    task = load_task(kb / "level2" / "34_ConvTranspose3d_LayerNorm_GELU_Scaling.py")
    assert task.level == 2
    assert task.constants["eps"] == 1e-5
    assert task.constants["bias"] is True
    with pytest.raises(TaskError, match="eps"):
        task.resized(eps=1)
    with pytest.raises(TaskError, match="bias"):
        task.resized(bias=0)
    small = task.resized(batch_size=2)
    assert small.constants["batch_size"] == 2
    assert _meta_input_shapes(small.source)[0][0] == 2


def test_resized_kernelbench_relu_exact(kb):
    task = load_task(kb / "level1" / "19_ReLU.py")
    small = task.resized(batch_size=3, dim=5)
    expected = task.source.replace("batch_size = 4096", "batch_size = 3").replace("dim = 393216", "dim = 5")
    assert small.source == expected
    assert _meta_input_shapes(small.source) == [(3, 5)]


# --------------------------------------------------------------------------- built-in suite


def test_builtin_counts(builtin):
    assert len(builtin) >= 30
    by_level = {lv: [t for t in builtin if t.level == lv] for lv in (1, 2, 3)}
    assert len(by_level[1]) >= 15
    assert len(by_level[2]) >= 10
    assert len(by_level[3]) >= 5
    assert all(t.level in (1, 2, 3) for t in builtin)
    assert len({(t.level, t.name) for t in builtin}) == len(builtin)
    for lv in (1, 2, 3):
        assert builtin_tasks(level=lv) == by_level[lv]


def test_builtin_sorted_by_number(builtin):
    for lv in (1, 2, 3):
        numbers = [_number(t) for t in builtin if t.level == lv]
        assert numbers == sorted(numbers)


def test_builtin_unknown_level_is_empty():
    assert builtin_tasks(level=99) == []


def test_builtin_small_sizes_and_small(builtin):
    for task in builtin:
        assert task.small_sizes, task.name
        assert all(type(v) is int and v > 0 for v in task.small_sizes.values()), task.name
        small = task.small()
        assert small.name == task.name and small.level == task.level
        for name, value in task.small_sizes.items():
            assert small.constants[name] == value, (task.name, name)
        # The small source is still a valid task, and get_inputs gives tensors on meta.
        assert check_source(small.source, task.name) == task.small_sizes
        ns = _run(small.source)
        with torch.device("meta"):
            inputs = ns["get_inputs"]()
            ns["get_init_inputs"]()
        assert any(isinstance(x, torch.Tensor) for x in inputs), task.name


def test_builtin_solution_for_each(builtin):
    for task in builtin:
        code = builtin_solution(task)
        assert "class ModelNew" in code, task.name
        assert "triton.jit" in code, task.name


def test_builtin_solution_missing():
    task = Task(name="no_such_task", source=GOOD, level=1)
    with pytest.raises(TaskError, match="no_such_task"):
        builtin_solution(task)


# --------------------------------------------------------------------------- resized


def test_good_source_loads(tmp_path):
    task = load_task(_write(tmp_path, "7_good.py", GOOD))
    assert task.name == "7_good"
    assert task.level is None  # no levelN folder in the path
    assert task.small_sizes == {"batch_size": 2, "dim": 8}
    assert task.constants == {
        "batch_size": 16, "dim": 32, "offset": -3, "depth": 5, "eps": 1e-5, "flag": True,
        "label": "café", "shape": (2, 3), "SMALL_SIZES": {"batch_size": 2, "dim": 8},
    }


def test_level_from_folder_name(tmp_path):
    assert load_task(_write(tmp_path / "level7", "1_a.py", GOOD)).level == 7
    assert load_task(_write(tmp_path / "level_4" / "sub", "1_a.py", GOOD)).level == 4


def test_resized_replaces_ints_only():
    task = task_from_source(GOOD, "good", level=1, path="x/good.py")
    new = task.resized(batch_size=4, dim=64, offset=7, depth=11)
    expected = (GOOD.replace("batch_size = 16", "batch_size = 4")
                .replace("dim: int = 32", "dim: int = 64")
                .replace("offset = -3", "offset = 7")
                .replace("(\n    5\n)", "(\n    11\n)"))
    assert expected != GOOD
    assert new.source == expected  # byte-identical apart from the replaced values
    assert new.constants["batch_size"] == 4 and new.constants["dim"] == 64
    assert new.constants["offset"] == 7 and new.constants["depth"] == 11
    assert (new.name, new.level, new.path, new.small_sizes) == (task.name, task.level, task.path, task.small_sizes)
    assert new.small_sizes is not task.small_sizes
    assert task.source == GOOD  # the original is untouched
    assert _meta_input_shapes(new.source) == [(4, 64 + 7 + 11), (2, 3)]
    assert _meta_input_shapes(task.source) == [(16, 32 - 3 + 5), (2, 3)]


def test_resized_to_negative_and_large_values():
    task = task_from_source(GOOD, "good")
    new = task.resized(offset=-10, batch_size=12345678901234)
    assert new.constants["offset"] == -10
    assert new.constants["batch_size"] == 12345678901234
    assert "offset = -10\n" in new.source


def test_resized_without_arguments_is_identity():
    task = task_from_source(GOOD, "good")
    assert task.resized().source == GOOD
    assert task.resized().key == task.key


def test_small_uses_small_sizes():
    task = task_from_source(GOOD, "good")
    small = task.small()
    assert small.constants["batch_size"] == 2 and small.constants["dim"] == 8
    assert _meta_input_shapes(small.source) == [(2, 8 - 3 + 5), (2, 3)]


def test_resized_works_with_crlf_line_endings():
    src = GOOD.replace("\n", "\r\n")
    task = task_from_source(src, "crlf")
    new = task.resized(dim=9)
    assert new.source == src.replace("dim: int = 32", "dim: int = 9")


@pytest.mark.parametrize("kwargs, needle", [
    ({"nope": 3}, "nope"),
    ({"eps": 1}, "eps"),  # float constant
    ({"flag": 1}, "flag"),  # bool constant
    ({"label": 1}, "label"),  # str constant
    ({"shape": 1}, "shape"),  # tuple constant
    ({"dim": 2.5}, "dim"),  # non-int value
    ({"dim": "4"}, "dim"),
    ({"dim": True}, "dim"),
    ({"dim": None}, "dim"),
])
def test_resized_errors(kwargs, needle):
    task = task_from_source(GOOD, "good")
    with pytest.raises(TaskError, match=needle):
        task.resized(**kwargs)


def test_resized_error_for_constant_only_in_a_function():
    src = GOOD.replace("def get_inputs():\n", "def get_inputs():\n    inner = 3\n")
    task = task_from_source(src, "good")
    with pytest.raises(TaskError, match="inner"):
        task.resized(inner=4)


@pytest.mark.parametrize("separator", ["\x0c", "\u2028", "\x1c", "\x85"])
def test_resized_with_unusual_line_separators_in_source(separator):
    src = GOOD.replace("# déjà vu", f"# déjà{separator}vu")
    task = task_from_source(src, "odd")
    assert task.resized(batch_size=4).source == src.replace("batch_size = 16", "batch_size = 4")


# --------------------------------------------------------------------------- malformed files

MALFORMED = {
    "syntax": (GOOD.replace("def get_inputs():", "def get_inputs(:"), ["syntax error", "line"]),
    "no_model": (GOOD.replace("class Model(nn.Module):", "class Other(nn.Module):"), ["class 'Model'"]),
    "model_not_class": (GOOD.replace("class Model(nn.Module):", "class M(nn.Module):") + "\ndef Model():\n    pass\n",
                        ["class 'Model'"]),
    "no_get_inputs": (GOOD.replace("def get_inputs():", "def make_inputs():"), ["function 'get_inputs'"]),
    "no_get_init_inputs": (GOOD.replace("def get_init_inputs():", "def init_inputs():"),
                           ["function 'get_init_inputs'"]),
    "get_inputs_raises": (GOOD.replace("    return [torch.randn(batch_size",
                                       "    raise RuntimeError('boom in inputs')\n    return [torch.randn(batch_size"),
                          ["get_inputs() raised", "RuntimeError", "boom in inputs"]),
    "get_init_inputs_raises": (GOOD.replace("    return [eps]", "    return [undefined_name]"),
                               ["get_init_inputs() raised", "NameError", "undefined_name"]),
    "import_raises": (GOOD.replace("import torch.nn as nn", "import torch.nn as nn\nraise ImportError('no deps here')"),
                      ["executing the module raised", "ImportError", "no deps here"]),
    "missing_module": (GOOD.replace("import torch.nn as nn", "import torch.nn as nn\nimport drk_no_such_module_xyz"),
                       ["executing the module raised", "drk_no_such_module_xyz"]),
    "get_inputs_not_list": (GOOD.replace("    return [torch.randn(batch_size, dim + offset + depth), torch.randn(*shape)]",
                                         "    return torch.randn(batch_size, dim)"),
                            ["get_inputs() must return a list", "Tensor"]),
    "get_init_inputs_not_list": (GOOD.replace("    return [eps]", "    return None"),
                                 ["get_init_inputs() must return a list", "NoneType"]),
    "small_sizes_not_dict": (GOOD.replace('SMALL_SIZES = {"batch_size": 2, "dim": 8}', "SMALL_SIZES = [2, 8]"),
                             ["SMALL_SIZES"]),
    "small_sizes_float": (GOOD.replace('"dim": 8}', '"dim": 8.5}'), ["SMALL_SIZES"]),
}


def test_malformed_sources_differ_from_good():
    for key, (src, _) in MALFORMED.items():
        assert src != GOOD, key


@pytest.mark.parametrize("key", sorted(MALFORMED))
def test_malformed_file(tmp_path, key):
    src, needles = MALFORMED[key]
    path = _write(tmp_path, f"5_{key}.py", src)
    with pytest.raises(TaskError) as info:
        load_task(path)
    message = str(info.value)
    assert str(path) in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_syntax_error_line_number(tmp_path):
    path = _write(tmp_path, "1_syn.py", "import torch\n\nx = = 1\n")
    with pytest.raises(TaskError, match=r"syntax error at line 3"):
        load_task(path)


def test_check_false_skips_execution(tmp_path):
    src, _ = MALFORMED["get_inputs_raises"]
    path = _write(tmp_path, "1_lazy.py", src)
    task = load_task(path, check=False)  # static checks only
    assert task.name == "1_lazy" and task.small_sizes == {"batch_size": 2, "dim": 8}
    with pytest.raises(TaskError, match="get_inputs"):
        load_task(path)
    # Static problems are still caught without execution.
    path2 = _write(tmp_path, "2_nomodel.py", MALFORMED["no_model"][0])
    with pytest.raises(TaskError, match="Model"):
        load_task(path2, check=False)


def test_load_tasks_names_the_malformed_file(tmp_path):
    _write(tmp_path, "1_a.py", GOOD)
    bad = _write(tmp_path, "2_b.py", MALFORMED["get_inputs_raises"][0])
    _write(tmp_path, "3_c.py", GOOD)
    with pytest.raises(TaskError) as info:
        load_tasks(tmp_path)
    assert str(bad) in str(info.value)
    assert "1_a.py" not in str(info.value) and "3_c.py" not in str(info.value)


def test_load_tasks_names_malformed_file_in_subfolder(tmp_path):
    _write(tmp_path / "level1", "1_a.py", GOOD)
    bad = _write(tmp_path / "level2", "1_b.py", "class Model:\n    pass\n")
    with pytest.raises(TaskError) as info:
        load_tasks(tmp_path)
    assert str(bad) in str(info.value)
    assert "get_inputs" in str(info.value)


def test_load_tasks_sorting_recursion_and_skips(tmp_path):
    for n in (100, 10, 2, 1, 20):
        _write(tmp_path / "level1", f"{n}_t.py", GOOD)
    _write(tmp_path / "level2", "3_x.py", GOOD)
    _write(tmp_path / "level1", "_helper.py", "this is not python {")  # leading underscore: skipped
    _write(tmp_path / "level1", "notes.txt", "not a task")  # not .py: skipped
    tasks = load_tasks(tmp_path)
    assert [(t.level, t.name) for t in tasks] == [
        (1, "1_t"), (1, "2_t"), (1, "10_t"), (1, "20_t"), (1, "100_t"), (2, "3_x")]


# As KernelBench's level4 files do: a model download while the module runs.
DOWNLOADS = GOOD.replace("import torch.nn as nn\n", """import torch.nn as nn
from transformers import AutoConfig

config = AutoConfig.from_pretrained("drk-lab-tests/no-such-model")
""")
# Records whether the Hugging Face libraries were offline while it ran.
RECORDS_OFFLINE = GOOD.replace("import torch.nn as nn\n", """import torch.nn as nn
import os

SEEN = os.environ.get("HF_HUB_OFFLINE")
if SEEN != "1":
    raise RuntimeError(f"online while loading: HF_HUB_OFFLINE={SEEN}")
""")


def test_a_broken_file_is_reported_and_the_rest_load(tmp_path):
    pytest.importorskip("transformers")
    _write(tmp_path, "1_a.py", GOOD)
    downloads = _write(tmp_path, "2_downloads.py", DOWNLOADS)
    _write(tmp_path, "3_offline.py", RECORDS_OFFLINE)
    before = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    broken: list[str] = []
    start = time.monotonic()
    tasks = load_tasks(tmp_path, broken=broken)
    assert time.monotonic() - start < 15  # offline: no network retries (they take about 25 s)
    assert [t.name for t in tasks] == ["1_a", "3_offline"]
    [reason] = broken
    assert reason.startswith(f"{downloads}: executing the module raised OSError") and "\n" not in reason
    assert {name: os.environ.get(name) for name in before} == before  # restored afterwards
    with pytest.raises(TaskError, match="2_downloads"):
        load_tasks(tmp_path)  # without a list, the first broken file raises
    assert [t.name for t in load_task_set(f"builtin:1,{tmp_path}", broken=[])][-2:] == ["1_a", "3_offline"]


@pytest.mark.parametrize("spec, needle", [
    ("builtin:one", "builtin:one: LEVEL must be one of 1, 2, 3"),
    ("builtin:9", "builtin:9: LEVEL must be one of"),
    ("no/such/folder", "no/such/folder: neither builtin[:LEVEL] nor a task file, folder or .jsonl(.gz) of rows"),
    ("no/such/rows.jsonl.gz", "rows.jsonl.gz: no such file of task rows"),
    ("data/rl/prompts.jsonl.gz:valid", "no row of split 'valid' (splits: heldout, train)"),
])
def test_load_task_set_errors_name_the_part(spec, needle):
    with pytest.raises(TaskError, match=re.escape(needle)):
        load_task_set(spec)


def test_a_file_of_task_rows_loads_in_order_by_split(tmp_path):
    # data/rl's prompt set: the held-out split alone, from any working directory (notebooks run in notebooks/)
    import contextlib
    import gzip

    rows = [json.loads(line) for line in gzip.open(REPO_DIR / "data/rl/prompts.jsonl.gz", "rt")]
    heldout = [r["name"] for r in rows if r["split"] == "heldout"]
    with contextlib.chdir(tmp_path):
        tasks = load_task_set("data/rl/prompts.jsonl.gz:heldout")
    assert [t.name for t in tasks] == heldout and len(heldout) == 1279
    assert tasks[0].source == rows[[r["name"] for r in rows].index(heldout[0])]["code"]
    plain = tmp_path / "two.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    assert [t.name for t in load_task_set(str(plain))] == [r["name"] for r in rows[:2]]


def test_load_tasks_empty_folder(tmp_path):
    assert load_tasks(tmp_path) == []


def test_missing_file_and_folder(tmp_path):
    missing = tmp_path / "nope.py"
    with pytest.raises(TaskError, match=re.escape(str(missing))):
        load_task(missing)
    with pytest.raises(TaskError, match=re.escape(str(tmp_path / "nodir"))):
        load_tasks(tmp_path / "nodir")
    with pytest.raises(TaskError):
        load_task(tmp_path)  # a folder is not a file
    f = _write(tmp_path, "1_a.py", GOOD)
    with pytest.raises(TaskError):
        load_tasks(f)  # a file is not a folder


def test_task_error_is_value_error():
    assert issubclass(TaskError, ValueError)


def test_unhashable_literal_constant_gives_task_error(tmp_path):
    path = _write(tmp_path, "1_bad.py", GOOD + "\nbad = {[1]: 2}\n")
    with pytest.raises(TaskError, match=re.escape(str(path))):
        load_task(path)


# --------------------------------------------------------------------------- rows


def test_task_from_row():
    task = task_from_row({"code": GOOD, "name": "3_Foo.py", "level": 2})
    assert task.name == "3_Foo"
    assert task.level == 2
    assert task.source == GOOD
    assert task.path is None
    assert task.small_sizes == {"batch_size": 2, "dim": 8}
    assert task == task_from_source(GOOD, "3_Foo", level=2)


def test_task_from_row_variants():
    assert task_from_row({"code": GOOD, "name": "3_Foo.py", "level": "2"}).level == 2
    assert task_from_row({"code": GOOD, "name": "3_Foo"}).level is None
    assert task_from_row({"source": GOOD, "name": "x"}).source == GOOD


def test_task_from_row_errors():
    with pytest.raises(TaskError, match="3_Foo"):
        task_from_row({"name": "3_Foo.py", "level": 1})
    with pytest.raises(TaskError, match="3_Foo"):
        task_from_row({"code": MALFORMED["get_inputs_raises"][0], "name": "3_Foo.py", "level": 1})


# --------------------------------------------------------------------------- serialisation, key


def test_to_dict_from_dict_round_trip():
    task = task_from_source(GOOD, "7_good", level=3, path="some/level3/7_good.py")
    d = task.to_dict()
    assert d == {"name": "7_good", "source": GOOD, "level": 3, "path": "some/level3/7_good.py",
                 "small_sizes": {"batch_size": 2, "dim": 8}, "full_sizes": {}, "size_reason": None}
    assert Task.from_dict(d) == task
    assert Task.from_dict(json.loads(json.dumps(d))) == task
    assert Task.from_dict(d).key == task.key
    d["small_sizes"]["dim"] = 99  # to_dict gives a copy
    assert task.small_sizes["dim"] == 8
    small = task.small()
    assert Task.from_dict(json.loads(json.dumps(small.to_dict()))) == small
    assert small.full_sizes == {"batch_size": 16, "dim": 32} and small.size_reason == "the task's SMALL_SIZES"


def test_round_trip_kernelbench(kb_all):
    for task in kb_all[::25]:
        assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task


def test_key():
    task = task_from_source(GOOD, "good")
    assert re.fullmatch(r"[0-9a-f]{16}", task.key)
    assert task.key == task_from_source(GOOD, "other_name", level=2).key  # depends on the source only
    assert task.resized(dim=33).key != task.key
    assert task.resized(dim=33).key != task.resized(dim=34).key
    assert task.resized(dim=33).key == task.resized(dim=33).key
    assert task.resized(dim=32).key == task.key  # same value: same source
    assert task.small().key != task.key
