"""The `drk` command: a policy over a task set (scripted in a real subprocess, evolutionary in process),
the one-file mode, and the argument checks. Real evaluations on the CPU interpreter."""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import drk_lab as drk
from drk_lab.agent.trajectory import read_jsonl
from drk_lab.cli import main, make_schedule
from drk_lab.policies.evolve import extract_code

ROOT = Path(__file__).resolve().parent.parent
RELU_TASK = ROOT / "data/tasks/level1/01_relu.py"
SILU_TASK = ROOT / "data/tasks/level1/03_silu.py"
RELU_SEED = (ROOT / "data/plain/level1/01_relu.py").read_text()


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

    assert main(["eval", "--tasks", str(RELU_TASK), "--policy", f"scripted:{folder}", "--out", str(out)]) == 2


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
    with pytest.raises(SystemExit):
        make_schedule(argparse.Namespace(stts="5,4,10", turns=3))
    with pytest.raises(SystemExit):
        main(["eval", str(RELU_TASK)])  # one file and no policy
    with pytest.raises(SystemExit, match="not one of"):
        main(["eval", "--tasks", str(RELU_TASK), "--policy", "nonsense"])
    with pytest.raises(drk.TaskError):
        main(["eval", "--tasks", "no/such/folder", "--policy", "evolve"])


def test_one_file_mode(tmp_path, relu_files, relu_solution, capsys):
    _, wrong = relu_files
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(relu_solution)
    bad.write_text(wrong)
    assert main(["eval", str(RELU_TASK), str(good), "--small", "--device", "cpu", "--trials", "1"]) == 0
    assert capsys.readouterr().out.startswith("correct")
    assert main(["eval", str(RELU_TASK), str(bad), "--small", "--device", "cpu", "--trials", "1", "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["error_kind"] == "mismatch" and not result["correct"]
