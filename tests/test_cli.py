"""The `drk` command: a policy over a task set (scripted in a real subprocess, evolutionary in process),
the one-file mode, sizes (small by default on the CPU, --full-size, --sizes), and everyday mistakes
(one line on stderr, status 2). Real evaluations on the CPU interpreter."""

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from drk_lab.agent.trajectory import read_jsonl
from drk_lab.cli import UsageError, main, make_schedule
from drk_lab.harness.task import REPO_DIR
from drk_lab.policies.evolve import extract_code

ROOT = Path(__file__).resolve().parent.parent
RELU_TASK = ROOT / "data/tasks/level1/01_relu.py"
SILU_TASK = ROOT / "data/tasks/level1/03_silu.py"
RELU_SEED = (ROOT / "data/plain/level1/01_relu.py").read_text()
KERNELBENCH = Path(os.environ.get("DRK_KERNELBENCH_DIR", REPO_DIR.parent / "shared" / "kernelbench"))
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


@pytest.fixture
def relu_files(tmp_path, relu_solution):
    """A scripted-policy folder: turn 1 a kernel that returns x where x <= 0 (wrong), turn 2 the solution."""
    wrong = relu_solution.replace("tl.where(x > 0, x, 0.0)", "tl.where(x > 0, 0.0, x)")
    assert wrong != relu_solution
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "turn_1.py").write_text(wrong)
    (folder / "turn_2.md").write_text(f"Fixed the sign.\n\n```python\n{relu_solution}```\n")
    return folder, wrong


def table_row(text: str, first_cells: str) -> list[str]:
    """The cells of the table line that starts with `first_cells` (cells split on runs of spaces)."""
    [line] = [ln for ln in text.splitlines() if re.match(re.escape(first_cells) + r"\s{2,}", ln)]
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.slow
def test_scripted_policy_run_in_a_subprocess(tmp_path, relu_files, relu_solution):
    folder, wrong = relu_files
    out = tmp_path / "runs" / "scripted.jsonl"
    cmd = [sys.executable, "-m", "drk_lab.cli", "eval", "--tasks", f"{RELU_TASK},{SILU_TASK}",
           "--policy", f"scripted:{folder}", "--turns", "2", "--device", "cpu", "--trials", "1", "--jobs", "2",
           "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "turn" in proc.stderr and "4/4" in proc.stderr  # the progress bar

    relu, silu = read_jsonl(out)
    assert (relu.task, silu.task) == ("01_relu", "03_silu")
    assert [t.code for t in relu.turns] == [wrong, relu_solution]
    assert [t.result.error_kind for t in relu.turns] == ["mismatch", None] and relu.turns[1].result.correct
    assert [t.result.error_kind for t in silu.turns] == ["mismatch", "mismatch"]  # relu's code is wrong for silu
    assert relu.turns[1].reward > relu.turns[0].reward == 0.0

    # per turn: 2 tasks; correct 0% at turn 1, 50% at turn 2; no timings on CPU, so Fast@p is 0
    assert table_row(proc.stdout, "1") == ["1", "2", "0.0", "0.0", "0.0", "0.0", "0.0", "0.0"]
    assert table_row(proc.stdout, "2") == ["2", "2", "0.0", "0.0", "0.0", "0.0", "50.0", "50.0"]
    assert table_row(proc.stdout, "level 1")[:2] == ["level 1", "2"]
    assert table_row(proc.stdout, "all")[-4:] == ["50.0", "1", "-", "-"]
    assert "CPU:" in proc.stdout and str(out) in proc.stdout
    assert "01_relu: sizes batch_size=7, dim=100 (the task's SMALL_SIZES" in proc.stdout
    assert relu.turns[1].result.notes[0].startswith("sizes batch_size=7, dim=100")

    assert main(["eval", "--tasks", str(RELU_TASK), "--policy", f"scripted:{folder}", "--out", str(out)]) == 2


@pytest.mark.slow
def test_evolve_policy_two_turns(tmp_path, capsys):
    out = tmp_path / "evolve.jsonl"
    rc = main(["eval", "--tasks", "builtin:1", "--limit", "1", "--policy", "evolve", "--turns", "2",
               "--device", "cpu", "--trials", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "skipped" in printed and "03_silu" in printed  # no plain kernel for it in data/plain
    [traj] = read_jsonl(out)
    assert traj.task == "01_relu" and len(traj.turns) == 2
    first, second = traj.turns
    assert first.code.strip() == RELU_SEED.strip() and first.response.startswith("Starting point")
    assert second.code == extract_code(second.response) and second.code != first.code
    numbers = [re.findall(r"\d+", code) for code in (first.code, second.code)]
    assert len(numbers[0]) == len(numbers[1]) and numbers[0] != numbers[1]  # only launch parameters changed
    assert first.result.ok and second.result.ok
    assert table_row(printed, "2")[-2:] == ["100.0", "100.0"]


def test_schedule_and_argument_checks(capsys):
    stts = make_schedule(argparse.Namespace(stts="5,4,10", turns=None))
    assert (stts.turns, stts.limit, stts.keep) == (14, 5, 4)  # Dr. Kernel's evaluation: 14 turns
    assert make_schedule(argparse.Namespace(stts=None, turns=None)).turns == 3
    with pytest.raises(UsageError, match="not both"):
        make_schedule(argparse.Namespace(stts="5,4,10", turns=3))
    with pytest.raises(SystemExit) as info:
        main(["eval", str(RELU_TASK)])  # one file and no policy: argparse, in one line too
    assert info.value.code == 2
    assert capsys.readouterr().err == ("drk eval: eval takes TASK_FILE CODE_FILE, or --policy KIND[:ARG] "
                                       "(with --tasks ...) (see drk eval -h)\n")


def test_one_file_mode(tmp_path, relu_files, relu_solution, capsys):
    _, wrong = relu_files
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(relu_solution)
    bad.write_text(wrong)
    assert main(["eval", str(RELU_TASK), str(good), "--small", "--device", "cpu", "--trials", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "sizes batch_size=7, dim=100 (the task's SMALL_SIZES; full size batch_size=8192, dim=8192)", "correct"]
    assert main(["eval", str(RELU_TASK), str(bad), "--small", "--device", "cpu", "--trials", "1", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["error_kind"] == "mismatch" and not result["correct"]


# A task that declares SMALL_SIZES and is itself small enough to run at full size on the interpreter.
TINY_RELU = RELU_TASK.read_text().replace("batch_size = 8192", "batch_size = 4").replace("dim = 8192", "dim = 32") \
    .replace('SMALL_SIZES = {"batch_size": 7, "dim": 100}', 'SMALL_SIZES = {"batch_size": 2, "dim": 16}')
# The built-in ReLU as KernelBench writes its files: no SMALL_SIZES, full size too big for a CPU.
RELU_NO_SMALL = RELU_TASK.read_text().replace('SMALL_SIZES = {"batch_size": 7, "dim": 100}\n', "")


def test_sizes_small_by_default_on_the_cpu_full_size_and_sizes(tmp_path, relu_solution, capsys):
    task, code = tmp_path / "1_tiny_relu.py", tmp_path / "code.py"
    task.write_text(TINY_RELU)
    code.write_text(relu_solution)

    def notes(*flags):
        assert main(["eval", str(task), str(code), "--device", "cpu", "--trials", "1", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["notes"]

    assert notes()[0] == "sizes batch_size=2, dim=16 (the task's SMALL_SIZES; full size batch_size=4, dim=32)"
    assert not [n for n in notes("--full-size") if n.startswith("sizes")]
    assert notes("--full-size", "--sizes", "dim=8")[0] == "sizes dim=8 (--sizes; full size dim=32)"
    assert notes("--sizes", " batch_size = 3 ")[0] == \
        "sizes batch_size=3, dim=16 (--sizes; full size batch_size=4, dim=32)"


def test_a_task_without_small_sizes_gets_derived_ones(tmp_path, relu_solution, capsys):
    task, code = tmp_path / "19_relu.py", tmp_path / "code.py"
    task.write_text(RELU_NO_SMALL)
    code.write_text(relu_solution)
    assert main(["eval", str(task), str(code), "--device", "cpu", "--trials", "1"]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert re.fullmatch(r"sizes batch_size=\d+, dim=\d+ \(small sizes derived for the CPU; "
                        r"full size batch_size=8192, dim=8192\)", first)
    assert second == "correct"


@pytest.mark.skipif(not (KERNELBENCH / "level1/19_ReLU.py").is_file(), reason="needs a KernelBench checkout")
def test_kernelbench_relu_on_the_cpu(tmp_path, relu_solution, capsys):
    code = tmp_path / "code.py"
    code.write_text(relu_solution)
    assert main(["eval", str(KERNELBENCH / "level1/19_ReLU.py"), str(code), "--trials", "1"]) == 0  # device: auto
    out = capsys.readouterr().out
    assert "full size batch_size=4096, dim=393216" in out and "correct" in out


def mistakes(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(arguments, the one line expected on stderr) for everyday mistakes."""
    (tmp_path / "not_a_model").mkdir()
    full = tmp_path / "full.jsonl"
    full.write_text("{}\n")
    code = str(RELU_TASK)  # any readable file serves as a candidate until something is evaluated
    policy = ["eval", "--tasks", str(RELU_TASK), "--policy"]
    return [
        (["eval", str(RELU_TASK), "missing.py"], "drk eval: CODE_FILE missing.py: no such file"),
        (["eval", "missing_task.py", code], "drk eval: TASK_FILE missing_task.py: no such file"),
        (["eval", "--tasks", "no/such/folder", "--policy", "evolve"],
         "drk eval: --tasks no/such/folder: neither builtin[:LEVEL] nor a task file, folder or .jsonl(.gz) of rows"),
        (["eval", "--tasks", "builtin:one", "--policy", "evolve"],
         "drk eval: --tasks builtin:one: LEVEL must be one of 1, 2, 3 (builtin:1)"),
        (["eval", "--tasks", "builtin:1", "--policy", "evolve", "--stts", "5,4"],
         "drk eval: --stts 5,4: expected U,K,I, three whole numbers (Dr. Kernel: 5,4,10)"),
        (["eval", "--tasks", "builtin:1", "--policy", "evolve", "--stts", "4,5,10"],
         "drk eval: --stts 4,5,10: need 0 <= remain_turns < max_user_turns, got 5, 4"),
        ([*policy, "scripted:my_answers/"],
         "drk eval: --policy scripted:my_answers/: no such folder (scripted:FOLDER replays the answer files in it)"),
        ([*policy, f"hf:{tmp_path / 'not_a_model'}"],
         f"drk eval: --policy hf:{tmp_path / 'not_a_model'}: not a model folder (expected a local folder with "
         "config.json, as save_pretrained writes it)"),
        ([*policy, "nonsense"], "drk eval: --policy nonsense: not one of scripted:FOLDER, evolve[:SEED_FOLDER], "
                                "hf:MODEL_PATH, openai:MODEL"),
        ([*policy, "evolve", "--out", str(full)],
         f"drk eval: --out {full}: exists and is not empty; choose another file or delete it"),
        ([*policy, "evolve", "--out", str(tmp_path)], f"drk eval: --out {tmp_path}: is a folder; give a file name"),
        (["eval", str(RELU_TASK), code, "--sizes", "batch_size=x"],
         "drk eval: --sizes batch_size=x: expected NAME=VALUE,... with whole numbers (batch_size=4,dim=256)"),
        (["eval", str(RELU_TASK), code, "--sizes", "rows=3"],
         "drk eval: --sizes rows=3: 01_relu has no module-level constant named rows"),
        (["eval", str(RELU_TASK), code, "--small", "--full-size"],
         "drk eval: argument --full-size: not allowed with argument --small (see drk eval -h)"),
        (["tasks", str(tmp_path / "nope")], f"drk tasks: FOLDER {tmp_path / 'nope'}: no such folder"),
        (["eval", str(tmp_path), code], f"drk eval: TASK_FILE {tmp_path}: a folder, not a task file"),
        ([*policy, "scripted:"], "drk eval: --policy scripted:: scripted needs its argument (scripted:FOLDER)"),
        ([*policy, "hf:"], "drk eval: --policy hf:: hf needs its argument (hf:MODEL_PATH)"),
    ]


def test_everyday_mistakes_are_one_line_with_status_2(tmp_path, capsys):
    for argv, line in mistakes(tmp_path):
        try:
            rc = main(argv)
        except SystemExit as e:  # argparse's own errors
            rc = e.code
        captured = capsys.readouterr()
        assert (rc, captured.err) == (2, line + "\n"), argv
        assert "Traceback" not in captured.out


@NO_CUDA
def test_cuda_on_a_machine_without_it(tmp_path, relu_solution, capsys):
    import drk_lab as drk

    code = tmp_path / "code.py"
    code.write_text(relu_solution)
    line = "--device cuda: CUDA is not available on this machine; use 'cpu' or 'auto'\n"
    for argv in (["eval", str(RELU_TASK), str(code), "--device", "cuda"],
                 ["eval", "--tasks", "builtin:1", "--policy", "evolve", "--device", "cuda"],
                 ["quickstart", "--device", "cuda"]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"drk {argv[0]}: {line}"
    task = drk.builtin_tasks(level=1)[0].small()
    with pytest.raises(ValueError, match="CUDA is not available"):
        drk.evaluate(task, relu_solution, device="cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        drk.evaluate_many([(task, relu_solution)], device="cuda", progress=False)
    with pytest.raises(ValueError, match="expected 'auto', 'cpu', 'cuda' or 'cuda:N'"):
        drk.evaluate(task, relu_solution, device="tpu")


@pytest.mark.slow
def test_a_mistake_in_a_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "drk_lab.cli", "eval", str(RELU_TASK), "missing.py"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", "drk eval: CODE_FILE missing.py: no such file\n")


@pytest.mark.slow
def test_tasks_lists_the_rest_and_reports_a_broken_file(tmp_path):
    pytest.importorskip("transformers")
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "1_relu.py").write_text(RELU_TASK.read_text())
    (folder / "2_downloads.py").write_text(RELU_TASK.read_text().replace("import torch.nn as nn\n", (
        "import torch.nn as nn\nfrom transformers import AutoConfig\n\n"
        "config = AutoConfig.from_pretrained('drk-lab-tests/no-such-model')  # a download, as in KernelBench's level4\n")))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "drk_lab.cli", "tasks", str(folder)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert time.monotonic() - start < 20  # offline: not the hub's 25 s of retries
    assert proc.returncode == 1
    assert re.fullmatch(r"level -  1_relu +batch_size=8192, dim=8192\n", proc.stdout)
    broken, total = proc.stderr.splitlines()
    assert broken.startswith(f"drk tasks: broken: {folder / '2_downloads.py'}: executing the module raised OSError")
    assert total == "drk tasks: 1 task(s), 1 broken file(s)"


def test_policy_run_skips_broken_files_derives_sizes_and_fills_an_empty_out(tmp_path, relu_solution, capsys):
    folder, answers = tmp_path / "tasks", tmp_path / "answers"
    folder.mkdir()
    answers.mkdir()
    (folder / "19_relu.py").write_text(RELU_NO_SMALL)
    (folder / "20_broken.py").write_text("import torch\n\nclass Model:\n    pass\n")
    (answers / "turn_1.py").write_text(relu_solution)
    out = tmp_path / "empty.jsonl"
    out.touch()
    assert main(["eval", "--tasks", str(folder), "--policy", f"scripted:{answers}", "--turns", "1",
                 "--device", "cpu", "--trials", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == f"drk eval: skipped {folder / '20_broken.py'}: no top-level function 'get_inputs'"
    assert f"--out {out} exists and is empty: writing the trajectories into it" in captured.out
    assert re.search(r"^19_relu: sizes batch_size=\d+, dim=\d+ \(small sizes derived for the CPU", captured.out, re.M)
    [trajectory] = read_jsonl(out)
    assert trajectory.turns[0].result.ok and "derived" in trajectory.turns[0].result.notes[0]


def test_quickstart_table_shows_whole_names_and_wraps_reasons(tasks):
    from drk_lab.harness.result import EvalResult
    from drk_lab.quickstart import format_table

    task = tasks["level1/01_relu"]
    long_label = "variant:impossible_speedup__partial_after_checks_and_then_some"
    reason = "the candidate computes only part of the output after the checks ran " * 4
    rows = [("solution", task, EvalResult(compiled=True, correct=True), "ok"),
            (long_label, task, EvalResult(error_kind="hacked", error=reason, hacked=True), "hacked")]
    table = format_table(rows, width=100)
    assert long_label in table
    wrapped = [line.strip() for line in table.splitlines()[4:]]
    assert wrapped[0].startswith("-> ") and all(len(line) <= 100 for line in table.splitlines()[4:])
    assert " ".join(wrapped).removeprefix("-> ") == " ".join(reason.split())  # every word whole


def test_baselines_need_a_gpu_and_a_task_set(capsys, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert main(["baselines", "builtin"]) == 2
    assert capsys.readouterr().err == ("drk baselines: baselines are GPU timings: no CUDA device here "
                                       "(nothing is timed on the CPU)\n")
    assert main(["baselines", "builtin", "--device", "cuda"]) == 2
    assert capsys.readouterr().err.startswith("drk baselines: --device cuda: CUDA is not available")
    with pytest.raises(SystemExit) as info:
        main(["baselines"])
    assert info.value.code == 2 and "the following arguments are required: tasks" in capsys.readouterr().err


HANG = '''
@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        while out.numel() > 0:
            out = out + 0
        return out
'''


def processes_with(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (the drk process and whatever it started)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_ctrl_c_during_an_evaluation_ends_everything_in_one_line(tmp_path):
    """SIGINT to `drk eval` on a candidate that never returns: exit 130 within 2 s, one line, no process left."""
    import signal

    code = tmp_path / "hang.py"
    code.write_text("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n" + HANG)
    marker = f"DRK_TEST_CTRL_C={os.getpid()}_{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-m", "drk_lab.cli", "eval", str(RELU_TASK), str(code), "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), marker.split("=")[0]: marker.split("=")[1]})
    deadline = time.monotonic() + 120
    while len(processes_with(marker)) < 3 and time.monotonic() < deadline:  # drk, the zygote, a worker pair
        time.sleep(0.2)
    time.sleep(3)  # the candidate is looping now
    assert proc.poll() is None, proc.communicate()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends to the foreground process group
    sent = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 2.0
    assert (proc.returncode, err) == (130, "drk eval: interrupted\n"), (out, err)
    time.sleep(0.5)
    assert processes_with(marker) == []
