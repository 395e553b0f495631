"""Loaders for public data sets: small files in each layout, written here as JSONL and parquet, read back
into Tasks that pass the task check and SFT rows that the cold-start reader takes; one-line errors."""

import json

import pytest

import drk_lab as drk
from drk_lab.agent.extraction import extract_code
from drk_lab.agent.prompts import initial_prompt
from drk_lab.data.kernelbench_format import NotKernelBench, kernelbench_source, reference_in_message
from drk_lab.data.public_sets import (PublicSetError, drkernel_cold_start, drkernel_rl_tasks, kernelbench_tasks,
                                      kernelbook_pairs)
from drk_lab.harness.task import TaskError, check_source, load_tasks

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

SCALE_SHIFT = '''\
import torch
import torch.nn as nn


class ScaleShift(nn.Module):

    def __init__(self, scale, shift=0.0):
        super(ScaleShift, self).__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x):
        return x * self.scale + self.shift


def get_inputs():
    return [torch.rand([4, 4, 4, 4])]


def get_init_inputs():
    return [[], {'scale': 2.0, 'shift': 0.5}]
'''

# Runs on the CPU under Triton's interpreter, unlike inductor's real output: so the test can evaluate it.
SCALE_SHIFT_TRITON = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep)
    tl.store(out_ptr + offs, x * scale + shift, mask=keep)


class ScaleShiftNew(nn.Module):

    def __init__(self, scale, shift=0.0):
        super(ScaleShiftNew, self).__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, input_0):
        x = input_0.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        scale_shift_kernel[(triton.cdiv(n, 256),)](x, out, n, self.scale, self.shift, BLOCK=256)
        return out
'''

LINEAR = '''\
import torch
import torch.nn as nn


class Linear(nn.Module):

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        return self.fc(x)


def get_inputs():
    return [torch.rand([4, 4])]


def get_init_inputs():
    return [[4], {'out_features': 3}]
'''


def stub_triton(entry: str) -> str:
    return (f"import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n"
            f"@triton.jit\ndef kernel_0(x_ptr):\n    pass\n\n\nclass {entry}New(nn.Module):\n"
            f"    def forward(self, input_0):\n        return input_0\n")


def module(entry: str, init: str = "self", body: str = "x", inputs: str = "[torch.rand([4, 4])]",
           init_inputs: str = "[[], {}]") -> str:
    return (f"import torch\nimport torch.nn as nn\n\n\nclass {entry}(nn.Module):\n\n    def __init__({init}):\n"
            f"        super().__init__()\n\n    def forward(self, x):\n        return {body}\n\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n")


def kernelbook_row(uuid, entry, python_code, triton_code=None):
    return {"uuid": uuid, "repo_name": f"someone/repo{uuid}", "module_name": entry, "synthetic": False,
            "licenses": ["MIT"], "stars": 3, "sha": "0" * 40, "repo_link": f"https://example.org/{uuid}",
            "python_code": python_code, "triton_code": triton_code or stub_triton(entry), "entry_point": entry}


KERNELBOOK_ROWS = [
    kernelbook_row(1, "ScaleShift", SCALE_SHIFT, SCALE_SHIFT_TRITON),
    kernelbook_row(2, "Linear", LINEAR),
    kernelbook_row(3, "Loose", module("Loose", "self, dim, **kwargs", init_inputs="[[4], {'eps': 0.1}]")),
    kernelbook_row(4, "double", "import torch\n\n\ndef double(x):\n    return 2 * x\n\n\n"
                   "def get_inputs():\n    return [torch.rand(4)]\n\n\ndef get_init_inputs():\n    return [[], {}]\n"),
    kernelbook_row(5, "Broken", module("Broken", inputs="[torch.rand(4).no_such_method()]")),
    kernelbook_row(6, "NoNew", module("NoNew"), stub_triton("Other")),
    kernelbook_row(7, "ScaleShift", SCALE_SHIFT, SCALE_SHIFT_TRITON),  # the same reference again
]

SIGMOID = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


batch_size = 16
dim = 64


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# The shape of Dr. Kernel's first message: an example architecture, then the task's, in indented fences
# whose first code line is indented too.
FIRST_MESSAGE = """You write custom Triton kernels to replace the PyTorch operators in the given architecture.

    Here is an example architecture:

    ```

    import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1, 128), torch.randn(1, 128)]


def get_init_inputs():
    return []
    ```

    You are given the following architecture:

    ```

    {code}
    ```

Optimize the architecture named Model with custom Triton operators! Name the result ModelNew.
"""


def trajectory(uuid, entry, first, final_speedup):
    return {"messages": [{"role": "user", "content": first},
                         {"role": "assistant", "content": "```python\n# turn 1\n```"},
                         {"role": "user", "content": "Server feedback: correct, speedup 0.8"},
                         {"role": "assistant", "content": "```python\n# turn 2\n```"}],
            "uuid": uuid, "entry_point": entry, "final_speedup": final_speedup, "best_round": 2}


COLD_START_ROWS = [
    trajectory(11, "Model", FIRST_MESSAGE.format(code=SIGMOID), 1.3),
    trajectory(12, "Model", FIRST_MESSAGE.format(code=SIGMOID), 0.0),  # the same task, another trajectory
    trajectory(13, "Swish", FIRST_MESSAGE.format(code=module("Swish", body="x * torch.sigmoid(x)")), 1.1),
    trajectory(14, "Model", "Make this faster, please.", 0.5),
]


def rl_row(data_source, ground_truth, extra_info):
    return {"data_source": data_source, "prompt": [{"role": "user", "content": "Optimize Model -> ModelNew"}],
            "ability": "kernel_optimization", "reward_model": {"ground_truth": ground_truth, "style": "rule"},
            "extra_info": extra_info}


RL_ROWS = [
    rl_row("cuda_llm", module("Clamp01", body="torch.clamp(x, 0.0, 1.0)"),
           {"entry_point": "Clamp01", "level": 1, "module_name": "Clamp01", "ops": "['clamp']",
            "original_prompt": "...", "repo_name": "someone/repo", "type": "module", "uuid": 7}),
    rl_row("kernelbench_level2_validation", SIGMOID.replace("torch.sigmoid(x)", "torch.tanh(x) * 2.0"),
           {"difficulty": None, "name": "3_Tanh_Scale", "problem_id": 3}),
    rl_row("cuda_llm", "class Model(nn.Module:\n", {"entry_point": "Model", "uuid": 8}),
]


def write(rows, path):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# -- KernelBook ----------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["jsonl", "parquet"])
def book(request, tmp_path_factory):
    return kernelbook_pairs(write(KERNELBOOK_ROWS, tmp_path_factory.mktemp("kb") / f"kb.{request.param}"))


def test_kernelbook_rows_become_tasks_and_sft_rows(book):
    assert book.read == 7 and [t.name for t in book.tasks] == ["1_ScaleShift", "2_Linear"]
    assert book.repeats == 1
    assert book.skipped == {"constructor arguments are not positional": 1,
                            "the reference has no top-level class of the entry point": 1,
                            "fails the task check": 1, "triton_code has no top-level class of the entry point": 1}
    assert any(line.startswith(f"{book.source}: ") and "'eps'" in line for line in book.skipped_rows)
    assert "7 rows read, 2 tasks, 2 SFT rows, 1 repeated references; skipped 4" in book.summary()
    for task in book.tasks:
        assert check_source(task.source, task.name) == {}
        assert "class Model(nn.Module)" in task.source
    linear = book.tasks[1].source
    assert "nn.Linear(in_features" in linear and "return [4, 3]" in linear  # nn.Linear is not renamed
    assert "return [2.0, 0.5]" in book.tasks[0].source


def test_kernelbook_sft_rows_hold_the_prompt_and_an_extractable_answer(book):
    row = book.sft_rows[0]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
    assert row["messages"][0]["content"] == initial_prompt(book.tasks[0])
    code, outcome = extract_code(row["messages"][1]["content"])
    assert outcome == "ok" and "class ModelNew(nn.Module)" in code and "ScaleShiftNew" not in code
    assert row["uuid"] == 1 and row["repo_name"] == "someone/repo1" and row["task"] == "1_ScaleShift"
    assert "python_code" not in row and "triton_code" not in row


@pytest.mark.slow
def test_a_recovered_task_evaluates_with_its_answer(tmp_path):
    book = kernelbook_pairs(write(KERNELBOOK_ROWS[:1], tmp_path / "one.jsonl"))
    code, _ = extract_code(book.sft_rows[0]["messages"][1]["content"])
    result = drk.evaluate(book.tasks[0], code, device="cpu", correctness_trials=2)
    assert result.ok and result.correct, result.error
    wrong = drk.evaluate(book.tasks[0], code.replace("x * scale + shift", "x * scale"), device="cpu",
                         correctness_trials=2)
    assert wrong.error_kind == "mismatch"  # the shift really reaches both modules


def test_sft_rows_load_with_the_cold_start_reader(book, tmp_path):
    pytest.importorskip("datasets")
    from drk_lab.data.cold_start import load_cold_start, write_cold_start

    data = load_cold_start(write_cold_start(book.sft_rows, tmp_path / "kernelbook.parquet"))
    assert len(data) == 2 and data[0]["messages"] == book.sft_rows[0]["messages"]
    cold = drkernel_cold_start(write(COLD_START_ROWS, tmp_path / "cs.parquet"))
    both = load_cold_start([write_cold_start(cold.sft_rows, tmp_path / "cs.jsonl"), tmp_path / "kernelbook.parquet"])
    assert len(both) == 6 and both["task"] == ["11_Model", "11_Model", "13_Swish", None, "1_ScaleShift", "2_Linear"]


# -- Dr. Kernel cold start -----------------------------------------------------------------------
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_cold_start_rows_and_their_tasks(tmp_path, suffix):
    pytest.importorskip("datasets")
    from drk_lab.data.cold_start import load_cold_start, write_cold_start

    cold = drkernel_cold_start(write(COLD_START_ROWS, tmp_path / f"cs.{suffix}"))
    assert [t.name for t in cold.tasks] == ["11_Model", "13_Swish"] and cold.repeats == 1
    assert [r["task"] for r in cold.sft_rows] == ["11_Model", "11_Model", "13_Swish", None]
    assert cold.skipped == {"no reference code in the first user message": 1}
    assert "a + b" not in cold.tasks[0].source and "torch.sigmoid(x)" in cold.tasks[0].source  # not the example
    assert "class Model(nn.Module)" in cold.tasks[1].source and "Swish" not in cold.tasks[1].source
    for task in cold.tasks:
        check_source(task.source, task.name)
    data = load_cold_start(write_cold_start(cold.sft_rows, tmp_path / f"out.{suffix}"), min_speedup=1.0)
    assert len(data) == 2 and data["uuid"] == [11, 13] and data["best_round"] == [2, 2]


def test_cold_start_prefers_an_original_python_code_column(tmp_path):
    row = {**COLD_START_ROWS[3], "original_python_code": SIGMOID}
    cold = drkernel_cold_start(write([row], tmp_path / "cs.jsonl"))
    assert [t.name for t in cold.tasks] == ["14_Model"] and not cold.skipped


# -- Dr. Kernel RL prompts -----------------------------------------------------------------------
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_rl_prompts_become_tasks(tmp_path, suffix):
    rl = drkernel_rl_tasks(write(RL_ROWS, tmp_path / f"rl.{suffix}"))
    assert [(t.name, t.level) for t in rl.tasks] == [("7_Clamp01", 1), ("3_Tanh_Scale", 2)]
    assert rl.skipped == {"syntax error": 1} and rl.sft_rows == []
    assert all(check_source(t.source, t.name) == {} for t in rl.tasks)
    assert "return []" in rl.tasks[0].source and "Clamp01" not in rl.tasks[0].source  # [[], {}] made positional
    first = drkernel_rl_tasks(tmp_path / f"rl.{suffix}", limit=1)
    assert first.read == 1 and [t.name for t in first.tasks] == ["7_Clamp01"]


# -- KernelBench checkout ------------------------------------------------------------------------
def test_a_kernelbench_folder_still_loads(tmp_path):
    level = tmp_path / "KernelBench" / "level1"
    level.mkdir(parents=True)
    (level / "1_Sigmoid.py").write_text(SIGMOID)
    (level / "2_Broken.py").write_text(SIGMOID.replace("def get_inputs", "def get_other"))
    assert [t.name for t in load_tasks(level, broken=[])] == ["1_Sigmoid"]
    with pytest.raises(TaskError, match="2_Broken.py: no top-level function 'get_inputs'"):
        load_tasks(level)
    found = kernelbench_tasks(tmp_path / "KernelBench")
    assert [(t.name, t.level) for t in found.tasks] == [("1_Sigmoid", 1)] and found.read == 2
    assert found.skipped == {"does not load": 1} and "2_Broken.py" in found.skipped_rows[0]


# -- the conversion itself -----------------------------------------------------------------------
def test_constructor_arguments_are_made_positional_in_parameter_order():
    code = module("Net", "self, a, b=2, c=3", init_inputs="[[1], {'c': 5}]")
    assert "return [1, 2, 5]" in kernelbench_source(code, "Net")
    assert "return [[1], {'c': 5}]" in code  # the input is untouched
    with pytest.raises(NotKernelBench, match="no value for 'a'"):
        kernelbench_source(module("Net", "self, a, b", init_inputs="[[], {'b': 2}]"), "Net")
    plain = module("Model", "self, n", init_inputs="[n]").replace("def get_inputs", "n = 4\n\n\ndef get_inputs")
    assert kernelbench_source(plain) == plain  # KernelBench's own format is kept as it is


def test_a_second_model_name_is_refused():
    code = module("Net").replace("import torch.nn as nn", "import torch.nn as nn\nModel = None")
    with pytest.raises(NotKernelBench, match="already uses the name Model"):
        kernelbench_source(code, "Net")


def test_reference_in_message_skips_blocks_of_other_classes():
    text = FIRST_MESSAGE.format(code=SIGMOID)
    assert reference_in_message(text).strip() == SIGMOID.strip()
    assert reference_in_message(text, "Swish") is None
    assert reference_in_message("no code here") is None


# -- one-line errors -----------------------------------------------------------------------------
def one_line_error(call, *needles):
    with pytest.raises(PublicSetError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


def test_a_missing_file_or_folder(tmp_path):
    one_line_error(lambda: kernelbook_pairs(tmp_path / "nope.parquet"), "nope.parquet", "no such file or folder")
    (tmp_path / "empty").mkdir()
    one_line_error(lambda: drkernel_rl_tasks(tmp_path / "empty"), "empty", "no .jsonl, .json, .parquet files")
    one_line_error(lambda: kernelbench_tasks(tmp_path / "nowhere"), "nowhere", "no such folder")


def test_a_missing_column_is_named_with_the_columns_found(tmp_path):
    rows = [{k: v for k, v in row.items() if k != "triton_code"} for row in KERNELBOOK_ROWS]
    one_line_error(lambda: kernelbook_pairs(write(rows, tmp_path / "kb.parquet")), "kb.parquet", "no 'triton_code'",
                   "columns: uuid, repo_name")
    rows = [KERNELBOOK_ROWS[0], {k: v for k, v in KERNELBOOK_ROWS[1].items() if k != "entry_point"}]
    one_line_error(lambda: kernelbook_pairs(write(rows, tmp_path / "kb.jsonl")), "kb.jsonl: line 2",
                   "no 'entry_point' column")
    one_line_error(lambda: drkernel_rl_tasks(write(COLD_START_ROWS, tmp_path / "cs.parquet")), "no 'reward_model'",
                   "columns: messages, uuid")
    one_line_error(lambda: drkernel_cold_start(write(RL_ROWS, tmp_path / "rl.jsonl")), "line 1", "no 'messages'")


def test_a_malformed_row_names_the_row_and_column(tmp_path):
    rows = [{**KERNELBOOK_ROWS[0], "python_code": 42}]
    one_line_error(lambda: kernelbook_pairs(write(rows, tmp_path / "kb.jsonl")), "kb.jsonl: line 1",
                   "column 'python_code' must be non-empty text, got int")
    rows = [RL_ROWS[0], {**RL_ROWS[1], "reward_model": {"style": "rule"}}]
    one_line_error(lambda: drkernel_rl_tasks(write(rows, tmp_path / "rl.jsonl")), "rl.jsonl: line 2",
                   "column 'reward_model' has no 'ground_truth' (keys: style)")
    bad = {**COLD_START_ROWS[0], "messages": COLD_START_ROWS[0]["messages"][:1] + [{"role": "tool", "content": "x"}]}
    one_line_error(lambda: drkernel_cold_start(write([bad], tmp_path / "cs.parquet")), "cs.parquet: row 0",
                   "column 'messages'", "message 1 has role 'tool'")
    (tmp_path / "junk.parquet").write_text("not parquet at all")
    one_line_error(lambda: kernelbook_pairs(tmp_path / "junk.parquet"), "junk.parquet", "not a parquet file")
    (tmp_path / "junk.jsonl").write_text('{"python_code": 1}\n{oops\n')
    one_line_error(lambda: kernelbook_pairs(tmp_path / "junk.jsonl"), "junk.jsonl: line 2", "not JSON")
