"""`drk data` end to end in real subprocesses: the RL prompt set (parquet and JSONL, both splits), then teacher
trajectories and SFT rows on the CPU; the rows load back into the SFT code and as RL tasks; everyday
mistakes are one line with status 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drk_lab.agent.context import episode_schedule
from drk_lab.agent.episodes import new_episode
from drk_lab.cli import main
from drk_lab.data.export import read_rl_tasks, read_rows, write_rows
from drk_lab.data.cold_start import load_cold_start

ROOT = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")


def drk(*args, cwd):
    return subprocess.run([sys.executable, "-m", "drk_lab.cli", "data", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def rl_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl")
    proc = drk("rl", "--n", "24", "--seed", "3", "--heldout", "0.3", "--out", str(out), cwd=out)
    assert proc.returncode == 0, proc.stderr
    assert "24/24" in proc.stderr  # the progress bar
    return out


@pytest.mark.slow
def test_rl_prompt_set_round_trips_and_feeds_the_rl_prompt_path(rl_dir):
    rows = read_rows(rl_dir / "prompts.parquet")
    assert rows == read_rows(rl_dir / "prompts.jsonl.gz") and len(rows) == 24
    summary = json.loads((rl_dir / "summary.json").read_text())
    assert summary["command"].startswith("drk data rl --n 24") and summary["seed"] == 3
    assert summary["by_split"]["train"] + summary["by_split"]["heldout"] == 24
    train = {r["combination"] for r in rows if r["split"] == "train"}
    assert train and not train & {r["combination"] for r in rows if r["split"] == "heldout"}
    for spec, task, row in read_rl_tasks(rl_dir / "prompts.parquet", check=True):
        assert (task.name, task.level, spec.ops, row["entry_point"]) == (row["name"], row["level"], row["ops"], "Model")
        # the RL trainer's rollouts start episodes this way: the prompt they send is the row's
        assert new_episode(task, episode_schedule(1), 0).trajectory.prompt == row["prompt"]
    assert len(read_rl_tasks(rl_dir / "prompts.parquet", split="heldout")) == summary["by_split"]["heldout"]


SFT_ARGS = ("--trajectories", "2", "--turns", "2", "--device", "cpu", "--jobs", "2", "--trials", "1")


@pytest.fixture(scope="module")
def sft_run(rl_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sft") / "run"
    proc = drk("sft", "--tasks", str(rl_dir / "prompts.parquet"), *SFT_ARGS, "--out", str(out), cwd=out.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, proc


@pytest.mark.slow
def test_sft_command_makes_rows_the_sft_code_loads(rl_dir, sft_run):
    out, proc = sft_run
    assert "2/2" in proc.stderr
    data = load_cold_start(out / "sft.parquet")
    assert len(data) == 2 and data[0]["messages"][-1]["role"] == "assistant"
    for column in ("uuid", "entry_point", "final_speedup", "best_round", "task", "ops", "level", "split",
                   "harness_version", "combination", "dtype"):
        assert column in data.column_names, column
    assert set(data["split"]) == {"train"} and all(r == 2 for r in data["best_round"])
    assert read_rows(out / "sft.jsonl.gz")[0]["messages"] == data[0]["messages"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["by_level"]["all"]["correct_share"] == 1.0 and summary["sft_rows"] == 2
    assert "| all | 2 | 100.0% | 100%, 100% | 0 | - |" in proc.stdout  # CPU: correct, nothing timed
    again = drk("sft", "--tasks", str(rl_dir / "prompts.parquet"), *SFT_ARGS, "--out", str(out), cwd=out.parent)
    assert again.returncode == 0 and "(0 run now, 2 already there" in again.stdout  # resumed: nothing to do
    assert json.loads((out / "summary.json").read_text())["run"]["skipped_done"] == 2


@pytest.mark.slow
def test_the_sft_trainer_takes_the_rows_and_trains_on_the_teachers_turns(sft_run, tmp_path):
    pytest.importorskip("trl")
    from drk_lab.rl.sft import run_sft
    from drk_lab.rl.tiny_model import make_tiny_model

    data = load_cold_start(sft_run[0] / "sft.parquet")
    run = run_sft(make_tiny_model(tmp_path / "tiny"), data, tmp_path / "out", max_length=16384, train=False)
    batch = run.trainer.data_collator([run.trainer.train_dataset[i] for i in range(len(data))])
    tokenizer = run.trainer.processing_class
    for row, labels in zip(data, batch["labels"]):
        trained = tokenizer.decode([t for t in labels.tolist() if t != -100])
        # the teacher's two replies are what is learnt; the prompt and the feedback are not
        assert "class ModelNew" in trained and trained.count("@triton.jit") >= 2
        assert row["messages"][0]["content"][:200] not in trained and "CORRECT:" not in trained


@pytest.mark.slow
def test_repair_rows_load_beside_the_sft_set_and_train_only_on_the_fix(rl_dir, sft_run, tmp_path):
    """`--repairs --skip 2`: other tasks than sft_run's, each a planted bug and its fix; both files load as one
    set, and the SFT collator's labels hold the fix but not the buggy reply."""
    pytest.importorskip("trl")
    from drk_lab.rl.sft import run_sft
    from drk_lab.rl.tiny_model import make_tiny_model

    out = tmp_path / "repairs"
    proc = drk("sft", "--tasks", str(rl_dir / "prompts.parquet"), *SFT_ARGS[:1], "4", *SFT_ARGS[2:], "--repairs",
               "--skip", "2", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    repairs = load_cold_start(out / "sft.parquet")
    assert len(repairs) >= 1 and not set(repairs["task"]) & set(load_cold_start(sft_run[0] / "sft.parquet")["task"])
    data = load_cold_start([sft_run[0] / "sft.parquet", out / "sft.parquet"])
    assert len(data) == 2 + len(repairs)
    run = run_sft(make_tiny_model(tmp_path / "tiny"), data, tmp_path / "out", max_length=16384, train=False)
    tokenizer = run.trainer.processing_class
    for i in range(2, len(data)):
        first, fix = [m for m in data[i]["messages"] if m["role"] == "assistant"]
        assert first["train"] is False and fix["content"].startswith("The previous version computed the wrong values")
        labels = run.trainer.data_collator([run.trainer.train_dataset[i]])["labels"][0]
        trained = tokenizer.decode([t for t in labels.tolist() if t != -100])
        assert trained.count("class ModelNew") == 1 and trained.startswith("The previous version")


def test_a_template_that_would_train_on_a_planted_bug_is_refused(rl_dir, tmp_path):
    """A chat template that marks every assistant message for loss would teach the planted bugs."""
    pytest.importorskip("trl")
    from drk_lab.data.cold_start import ColdStartError
    from drk_lab.rl.sft import run_sft
    from drk_lab.rl.tiny_model import CHAT_TEMPLATE, make_tiny_model

    rows = [{"messages": [{"role": "user", "content": "task"},
                          {"role": "assistant", "content": "the planted bug " * 5, "train": False},
                          {"role": "user", "content": "FAILED (mismatch)"},
                          {"role": "assistant", "content": "The previous version computed the wrong values."}]}]
    write_rows(rows, tmp_path / "repairs.parquet")
    data = load_cold_start(tmp_path / "repairs.parquet")
    model = make_tiny_model(tmp_path / "tiny")
    run_sft(model, data, tmp_path / "ok", max_length=4096, train=False)  # the project's template: accepted
    marks_all = CHAT_TEMPLATE.split("{%- if message['train']")[0] + (
        "{%- generation -%}{{ message['content'] + '<|im_end|>' }}{%- endgeneration -%}"
        + CHAT_TEMPLATE.split("{%- endif -%}", 1)[1])
    with pytest.raises(ColdStartError, match='marked "train": false'):
        run_sft(model, data, tmp_path / "no", max_length=4096, train=False, chat_template=marks_all)


def test_the_planted_bug_check_finds_its_row_when_truncation_drops_an_earlier_one(tmp_path):
    """TRL drops a row whose prompt alone fills max_length; the check must still read the repair row's own
    labels, not those of the row that moved into its place (here a plain row whose reply begins as the
    planted bug does, which the check would take for the bug trained on)."""
    pytest.importorskip("trl")
    from drk_lab.rl.sft import run_sft
    from drk_lab.rl.tiny_model import make_tiny_model

    reply = "A first version. " * 20
    rows = [{"messages": [{"role": "user", "content": "a very long task " * 400},
                          {"role": "assistant", "content": "short"}]},
            {"messages": [{"role": "user", "content": "task"},
                          {"role": "assistant", "content": reply + "with the planted bug", "train": False},
                          {"role": "user", "content": "FAILED (mismatch)"},
                          {"role": "assistant", "content": "The previous version computed the wrong values."}]},
            {"messages": [{"role": "user", "content": "another task"},
                          {"role": "assistant", "content": reply + "right"}]}]
    write_rows(rows, tmp_path / "rows.parquet")
    data = load_cold_start(tmp_path / "rows.parquet")
    run = run_sft(make_tiny_model(tmp_path / "tiny"), data, tmp_path / "out", max_length=512, train=False)
    assert len(run.trainer.train_dataset) == 2  # the long row went, the check ran on the others


def test_write_rows_names_an_unknown_suffix(tmp_path):
    with pytest.raises(ValueError, match="unknown format"):
        write_rows([{"a": 1}], tmp_path / "rows.csv")


@pytest.mark.parametrize("args, message", [
    (["sft", "--tasks", "missing.parquet", "--out", "o", "--device", "cpu"], "--tasks missing.parquet: no such file"),
    (["sft", "--tasks", "rows.txt", "--out", "o", "--device", "cpu"], "--tasks rows.txt: unknown format"),
    (["rl", "--n", "5", "--heldout", "1.5", "--out", "o"], "--heldout 1.5: must be at least 0 and below 1"),
    (["rl", "--n", "0", "--out", "o"], "--n: expected a whole number of at least 1"),
    (["tasks", "--n", "2"], "the following arguments are required: --out"),
])
def test_everyday_mistakes_are_one_line(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rows.txt").write_text("not rows\n")
    try:
        code = main(["data", *args])
    except SystemExit as e:  # argparse's own errors exit from inside main, in one line too
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


@NO_CUDA
def test_sft_on_cuda_without_cuda_is_one_line(tmp_path, capsys):
    assert main(["data", "sft", "--tasks", "x.parquet", "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("drk data: --device cuda") and len(err.splitlines()) == 1


@pytest.mark.slow
def test_tasks_command_writes_loadable_files(tmp_path):
    proc = drk("tasks", "--n", "6", "--seed", "1", "--out", str(tmp_path / "gen"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run([sys.executable, "-m", "drk_lab.cli", "tasks", str(tmp_path / "gen")], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert listed.returncode == 0, listed.stderr
    index = read_rows(tmp_path / "gen" / "index.jsonl")
    assert len(index) == 6 and all(row["name"] in listed.stdout for row in index)
