"""experiments/mini/run.py end to end on the CPU with tiny sizes (config/smoke.py): every phase runs as a real
subprocess, writes its JSON, the RL phase resumes from its checkpoint, and everyday mistakes get one
line and exit status 2."""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # whole smoke runs of the mini pipeline

pytest.importorskip("transformers")
pytest.importorskip("trl")
pytest.importorskip("datasets")
pd = pytest.importorskip("pandas")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "mini" / "run.py"


def run(*args, check=True):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    env.pop("OUT", None)
    # the test's own --sft-data or --rl-data, given later, wins
    done = subprocess.run([sys.executable, str(SCRIPT), *map(str, data_args() + list(args))], capture_output=True,
                          text=True, env=env, timeout=600)
    if check:
        assert done.returncode == 0, done.stderr[-3000:]
    return done


@functools.cache
def data() -> dict[str, list[Path]]:
    """Every call's --sft-data and --rl-data: every tenth row of the shipped SFT and repair sets, and every fifth
    of the RL prompt set with its split rule beside it. The phases read, tokenize and pack whatever rows they are
    given; the whole sets (16 M characters of conversations, 6,000 references parsed and resized) took tens
    of seconds a call. A folder under the tests' TMPDIR (removed at exit)."""
    import pyarrow.parquet as pq

    folder = Path(tempfile.mkdtemp(prefix="mini_data_"))
    for name in ("sft.parquet", "repairs.parquet"):
        table = pq.read_table(REPO / "data" / "sft" / name)
        pq.write_table(table.take(list(range(0, table.num_rows, 10))), folder / name)
    with gzip.open(REPO / "data" / "rl" / "prompts.jsonl.gz", "rt") as f:
        rows = f.readlines()[::5]
    with gzip.open(folder / "prompts.jsonl.gz", "wt") as f:
        f.writelines(rows)
    shutil.copy(REPO / "data" / "rl" / "summary.json", folder)
    return {"--sft-data": [folder / "sft.parquet", folder / "repairs.parquet"], "--rl-data": [folder / "prompts.jsonl.gz"]}


def data_args() -> list:
    return [item for option, paths in data().items() for item in (option, *paths)]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("mini")
    run("--config", "smoke", "--out", out / "run", "--export", out / "export")
    return out


def read(path: Path):
    return json.loads(path.read_text())


def test_every_phase_writes_its_results(smoke):
    run_dir = smoke / "run"
    tokenizer = read(run_dir / "tokenizer.json")
    conversations, repairs = (len(pd.read_parquet(path)) for path in data()["--sft-data"])
    assert tokenizer["parameters"] > 10_000 and tokenizer["sft_rows"] == conversations + repairs and repairs > 10
    assert len(pd.read_parquet(REPO / "data" / "sft" / "sft.parquet")) > 1000
    # the smoke sizes allow 24 new tokens: no teacher reply fits, and the phase says so
    assert tokenizer["reply_tokens"]["p50"] > 24 and tokenizer["replies_within_max_new_tokens"] == 0
    pretrain = read(run_dir / "pretrain.json")
    assert len(pretrain["loss"]) == 2 and all(x > 0 for x in pretrain["loss"])
    # repair rows stay out of pretraining (their buggy replies must not be targets)
    assert pretrain["sft_conversations"] == conversations and pretrain["first_turn_tasks"] == 20  # the smoke's limit
    assert pretrain["new_tasks"] == 20 and pretrain["drills"] == 20 and pretrain["combinations"] > 20
    assert pretrain["epilogue_drills"] == 10
    assert read(run_dir / "sft.json")["loss"]
    for phase in ("pretrain", "sft", "rl_trloo"):  # teacher-forced scoring of the teacher's replies, seen and held-out
        probe = read(run_dir / f"{phase}.json")["reads_the_task"]
        assert probe["heldout"]["replies"] == 2 and probe["seen"]["replies"] == 1
        assert probe["heldout_drills"]["drills"] == probe["heldout_epilogue_drills"]["drills"] == 2
        for part in probe.values():
            assert 0 <= part["exact_share"] <= 1 and 0 <= part["token_accuracy"] < 1 and part["errors_median"] > 0
    genbench = read(run_dir / "genbench.json")
    assert genbench["static_cache"]["generated_tokens"] == 8 * 16 and genbench["logprob_max_abs_diff"] < 1e-4
    (step,) = genbench["decode_step"]  # one fixed-shape decoding step's cost, and its largest operators
    assert step["rows"] == 4 and step["eager_ms"] > 0 and "graph_ms" not in step  # no CUDA graph on a CPU
    times = [op["ms_per_step"] for op in step["top_ops"]]
    assert 0 < len(times) <= 12 and times == sorted(times, reverse=True) and times[0] > 0
    rl = read(run_dir / "rl_trloo.json")
    assert rl["steps_done"] == 1 and not rl["resumed"]
    # the rollouts' operator counts per step; the rollouts themselves are not kept
    (counts,) = rl["chain_per_step"]
    assert counts["step"] == 1 and 0 <= counts["chain_right"] <= counts["chain_replies"] <= 2 * 2 * 2
    assert 0 <= counts["chain_kept"] <= counts["chain_to_keep"]
    assert 0 < counts["first_reply_tokens"]
    assert 0 <= counts["first_reply_tokens_common"] <= counts["first_reply_tokens_shared"] <= counts["first_reply_tokens"]
    assert not list((run_dir / "rl_trloo" / "log" / "rollouts").glob("*.jsonl"))
    (row,) = [json.loads(line) for line in (run_dir / "rl_trloo" / "log" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward_mean/turn_1", "fast@1/turn_1", "entropy", "grad_norm", "mrs/rejected_frac", "prs/rejected_frac"):
        assert key in row, key
    assert row["mrs/log_ratio_abs_max"] < 1e-3  # the sampler's log-probs are the trainer's
    assert row["cut_off_frac"] > 0.5  # a barely trained model rarely stops within 24 tokens
    for name in ("sft", "rl_trloo"):
        report = read(run_dir / f"eval_{name}.json")
        for batch, split in report["seconds_split"].items():  # where each batch's time went
            assert split["generation"] > 0 and split["evaluation"] > 0
            assert split["generation"] + split["evaluation"] <= report["seconds_by_batch"][batch]
        for part, turns in (("heldout", 2), ("seen", 2), ("builtin", 2), ("heldout_stts", 3)):
            summary = report[part]
            # two episodes per task in the smoke (eval_samples=2), STTS one
            assert summary["episodes"] == summary["tasks"] * (1 if part == "heldout_stts" else 2) > 0
            assert [r["turn"] for r in summary["per_turn"]] == list(range(1, turns + 1))
            for key in ("correct_rate", "fast@1", "fast@1.2", "mean_coverage", "hacks_per_100_evaluations"):
                assert key in summary
            turns_run = [t for line in (run_dir / f"eval_{name}_{part}.jsonl").read_text().splitlines()
                         for t in json.loads(line)["turns"]]
            cut = sum(t["finish_reason"] == "length" for t in turns_run)
            assert summary["cut_off_rate"] == cut / len(turns_run) and summary["replies"] == len(turns_run)
            kinds = [t["result"]["error_kind"] or ("correct" if t["result"]["correct"] else "wrong") for t in turns_run]
            assert summary["outcomes"] == {k: kinds.count(k) for k in set(kinds)}
            if name != "sft":  # the same episodes after SFT, compared one by one
                paired = summary["paired_with_sft"]
                solved = sum(paired[k] for k in ("solved_by_both", "solved_only_before", "solved_only_after",
                                                 "solved_by_neither"))
                assert paired["episodes"] == solved == summary["episodes"]
                assert paired["same_first_reply"] <= paired["episodes"]
    assert "paired_with_sft" not in read(run_dir / "eval_sft.json")["heldout"]


def test_the_notebooks_tables_read_the_exported_run(smoke):
    """notebook 06's helpers on the --export copy: SFT first in the headline, the teacher-forced scores in
    the order the model was trained (pretraining, SFT, then the RL run), every evaluation's outcomes."""
    from experiments.mini.report import (chain_step_rows, family_rows, headline_rows, outcome_rows, read_run, reading_rows,
                                     timing_rows)

    result = read_run(smoke / "export")
    assert [row["checkpoint"] for row in headline_rows(result)] == ["sft", "rl_trloo"]
    assert [(row["run"], row["step"]) for row in chain_step_rows(result)] == [("trloo", 1)]
    assert [(row["phase"], row["part"]) for row in reading_rows(result)] == [
        (phase, part) for phase in ("pretrain", "sft", "rl_trloo")
        for part in ("heldout", "seen", "heldout_drills", "heldout_epilogue_drills")]
    outcomes = outcome_rows(result)
    assert [row["checkpoint"] for row in outcomes] == ["sft", "rl_trloo"]
    for row in outcomes:
        assert sum(v for k, v in row.items() if k != "checkpoint") == result["evals"][row["checkpoint"]]["heldout"]["replies"]
    for name in ("sft", "rl_trloo"):  # every held-out episode is in one kind of task
        kinds = [row for row in family_rows(result) if row["checkpoint"] == name]
        assert sum(row["episodes"] for row in kinds) == result["evals"][name]["heldout"]["episodes"]
    phases = [row["phase"] for row in timing_rows(result)]
    assert "eval sft" in phases and "eval sft: heldout+seen+builtin, generation" in phases
    assert "eval rl_trloo: heldout_stts, evaluation" in phases and "rl_trloo: steps" in phases


def test_the_summary_counts_replies_that_wrote_the_tasks_operators():
    """chain_right counts replies (with code, to tasks with a pointwise chain) whose chain is the task's:
    the teacher's reply counts, one with an operator swapped does not, a reply without code is no reply;
    chain_kept counts the replies after a right one that still have it."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from drk_lab.data.spec import TaskSpec
    from drk_lab.data.teacher import solution
    from drk_lab.harness.result import EvalResult
    from experiments.mini.report import summarize_evaluation

    sizes = (("batch_size", 8), ("dim", 64))
    chain = TaskSpec(1, None, ("tanh", "scale:2.0"), "float32", sizes, sizes)
    rows = TaskSpec(1, None, ("softmax",), "float32", sizes, sizes)
    right = solution(chain, 1)
    swapped = right.replace("2.0 * tl.sigmoid(2.0 * v) - 1.0", "tl.sigmoid(v)")
    assert swapped != right

    def episode(spec, *codes):
        turns = [Turn(spec.name, i, 0, [], 10, 40, "reply", "stop", "ok" if code else "no_code", code,
                      EvalResult(compiled=code is not None), 0.0, "") for i, code in enumerate(codes)]
        return Trajectory(spec.name, "prompt", turns)

    trajectories = [episode(chain, right, swapped, None), episode(rows, solution(rows, 1)), episode(chain, right, right)]
    summary = summarize_evaluation(trajectories, specs={s.name: s for s in (chain, rows)})
    assert (summary["chain_replies"], summary["chain_right"]) == (4, 3)
    # after a right chain: swapped in the first episode, kept in the last; a wrong chain has nothing to keep
    assert (summary["chain_to_keep"], summary["chain_kept"]) == (2, 1)
    assert "chain_replies" not in summarize_evaluation(trajectories)
    assert "chain_replies" not in summarize_evaluation(trajectories, specs={"another_task": chain})  # no spec of theirs


def test_the_summary_counts_solved_and_fast_episodes_per_kind_of_task():
    """by_family: a level-1 task without a head is its operator's kind (a leaky ReLU's slope left out), a
    task with one is its head's; an episode is solved when some turn is correct and not hacked, fast@1
    when such a turn is also at least as fast as eager PyTorch; tasks without a spec are left out."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from drk_lab.data.spec import TaskSpec
    from drk_lab.harness.result import EvalResult
    from experiments.mini.report import summarize_evaluation, task_family

    rows = (("batch_size", 8), ("dim", 64))
    mean = TaskSpec(1, None, ("mean",), "float32", rows, rows)
    leaky = TaskSpec(1, None, ("leaky_relu:0.1",), "float32", rows, rows)
    gemm = (("batch_size", 8), ("in_features", 64), ("out_features", 32))
    linear = TaskSpec(2, "linear", ("relu",), "float16", gemm, gemm)
    assert [task_family(s) for s in (mean, leaky, linear)] == ["L1 mean", "L1 leaky_relu", "L2 linear"]

    def episode(task, *results):
        return Trajectory(task, "prompt", [Turn(task, i, 0, [], 10, 40, "reply", "stop", "ok", "code", r, 0.0, "")
                                           for i, r in enumerate(results)])

    wrong, slow = EvalResult(compiled=True, correct=False), EvalResult(compiled=True, correct=True, speedup=0.8)
    fast, hacked = EvalResult(compiled=True, correct=True, speedup=1.3), EvalResult(compiled=True, correct=True,
                                                                                      speedup=2.0, hacked=True)
    episodes = [episode(mean.name, wrong, wrong), episode(mean.name, wrong, slow), episode(linear.name, fast, wrong),
                episode(linear.name, hacked, wrong), episode(leaky.name, slow), episode("builtin_task", fast)]
    summary = summarize_evaluation(episodes, specs={s.name: s for s in (mean, leaky, linear)})
    assert summary["by_family"] == {"L1 mean": {"episodes": 2, "solved": 1, "fast@1": 0},
                                    "L2 linear": {"episodes": 2, "solved": 1, "fast@1": 1},
                                    "L1 leaky_relu": {"episodes": 1, "solved": 1, "fast@1": 0}}
    assert "by_family" not in summarize_evaluation(episodes)


def test_the_summary_counts_what_each_reply_made_of_the_one_before():
    """Consecutive replies: a correct one followed by a correct one is kept, by a wrong or hacked one
    lost; a wrong one (a mismatch, or no code at all) followed by a correct one is repaired. A one-turn
    episode has no pair."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from drk_lab.harness.result import EvalResult
    from experiments.mini.report import summarize_evaluation

    def episode(*results):
        return Trajectory("t", "prompt", [Turn("t", i, 0, [], 10, 40, "reply", "stop", "ok", None if r is None else "code",
                                               r, 0.0, "") for i, r in enumerate(results)])

    right, wrong = EvalResult(compiled=True, correct=True), EvalResult(compiled=True, correct=False)
    hacked = EvalResult(compiled=True, correct=True, hacked=True)
    episodes = [episode(right, right, wrong), episode(wrong, right), episode(None, wrong, hacked), episode(right),
                episode(right, hacked)]
    summary = summarize_evaluation(episodes)
    assert (summary["correct_to_keep"], summary["correct_kept"]) == (3, 1)  # kept once; lost to a mismatch and to a hack
    assert (summary["wrong_to_repair"], summary["wrong_repaired"]) == (3, 1)


def test_shared_first_tokens_counts_each_replys_longest_prefix_with_a_sibling():
    """A reply's shared tokens: its longest common prefix with another reply to the same task; common
    tokens: the prefix all the task's replies share; a reply alone on its task shares nothing, and later
    turns do not count."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from experiments.mini.report import shared_first_tokens

    def episode(task, *replies):
        return Trajectory(task, "prompt", [Turn(task, i, 0, [], 10, 40, "reply", "stop", "ok", "code", None, 0.0, "",
                                                token_ids=ids) for i, ids in enumerate(replies)])

    episodes = [episode("a", [1, 2, 3, 4], [9, 9]), episode("a", [1, 2, 5]), episode("a", [1, 2, 3, 7, 7]),
                episode("b", [1, 2, 3], [1, 2, 3])]
    # a: 4 tokens sharing 3 (with the third), 3 sharing 2, 5 sharing 3, and [1, 2] common to all three;
    # b: 3 tokens, no sibling
    assert shared_first_tokens(episodes) == {"first_reply_tokens": 15, "first_reply_tokens_shared": 8,
                                             "first_reply_tokens_common": 6}


def test_caught_hacks_lists_each_caught_reply_with_its_checks_and_code():
    """A reply the harness caught (hacked, or an error of kind "hacked") is a row with the checks that
    fired and its code; correct, wrong and code-less replies are not."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from drk_lab.harness.result import EvalResult
    from experiments.mini.report import caught_hacks

    def episode(task, sample, *results):
        return Trajectory(task, "prompt", [Turn(task, i, 0, [], 10, 40, "reply", "stop", "ok", f"code {task} {i}",
                                                r, 0.0, "") for i, r in enumerate(results)], sample=sample)

    decoy = EvalResult(compiled=True, hacked=True, hack_reasons=["kernel_not_launched"], error="no launch")
    refused = EvalResult(compiled=False, error_kind="hacked", hack_reasons=["torch_in_forward"], error="torch op")
    right, wrong = EvalResult(compiled=True, correct=True), EvalResult(compiled=True, correct=False)
    rows = caught_hacks([episode("a", 0, right, decoy), episode("b", 3, refused, wrong), episode("c", 0, right, None)])
    assert rows == [
        {"task": "a", "sample": 0, "turn": 1, "reasons": ["kernel_not_launched"], "error": "no launch", "code": "code a 1"},
        {"task": "b", "sample": 3, "turn": 0, "reasons": ["torch_in_forward"], "error": "torch op", "code": "code b 0"}]


def test_the_paired_comparison_matches_episodes_by_task_and_sample():
    """Solved by both, by one of the two or by neither, and identical replies, episode by episode; an
    episode the base lacks is left out."""
    from drk_lab.agent.trajectory import Trajectory, Turn
    from drk_lab.harness.result import EvalResult
    from experiments.mini.report import paired_comparison

    def episode(task, sample, *turns):
        return Trajectory(task, "prompt", [Turn(task, i, 0, [], 10, 40, "reply", "stop", "ok", "code",
                                                EvalResult(compiled=True, correct=ok), 0.0, "", token_ids=ids)
                                           for i, (ids, ok) in enumerate(turns)], sample=sample)

    before = [episode("a", 0, ([1, 2], True), ([3], False)), episode("a", 1, ([1], False), ([2], False)),
              episode("b", 0, ([5], False), ([6], True)), episode("c", 0, ([7], False), ([8], False))]
    after = [episode("a", 0, ([1, 2], False), ([4], False)), episode("a", 1, ([1], False), ([2], True)),
             episode("b", 0, ([5], False), ([6], True)), episode("c", 0, ([9], False), ([8], False)),
             episode("d", 0, ([1], True), ([1], True))]
    assert paired_comparison(before, after) == {
        "episodes": 4, "solved_by_both": 1, "solved_only_before": 1, "solved_only_after": 1, "solved_by_neither": 1,
        "same_first_reply": 3, "same_second_reply": 3,
        "tasks_better_after": 0, "tasks_better_before": 0,  # task a: one episode lost, one gained; b and c even
        "kept_only_after": 0, "kept_only_before": 0}  # no episode started with a correct reply after both
    # a task whose two samples were both lost counts once: a test over tasks weighs it as one observation
    lost = [episode("e", 0, ([1], True), ([2], False)), episode("e", 1, ([1], True), ([2], False)),
            episode("f", 0, ([1], False), ([2], False))]
    won = [episode("e", 0, ([3], False), ([2], False)), episode("e", 1, ([3], False), ([2], False)),
           episode("f", 0, ([1], False), ([2], True))]
    counts = paired_comparison(lost, won)
    assert (counts["solved_only_before"], counts["solved_only_after"]) == (2, 1)
    assert (counts["tasks_better_before"], counts["tasks_better_after"]) == (1, 1)
    # the second turn after a correct first reply under both: kept only after, only before, by both; an
    # episode whose first reply was right under one checkpoint alone does not count
    right, wrong = ([1], True), ([2], False)
    base = [episode("g", 0, right, wrong), episode("g", 1, right, right), episode("h", 0, right, right),
            episode("k", 0, right, right)]
    later = [episode("g", 0, right, right), episode("g", 1, right, right), episode("h", 0, right, wrong),
             episode("k", 0, wrong, right)]
    counts = paired_comparison(base, later)
    assert (counts["kept_only_after"], counts["kept_only_before"]) == (1, 1)
    assert counts["solved_only_before"] == counts["solved_only_after"] == 0  # all solved in turn 1 or 2


def test_the_sign_test_weighs_only_the_episodes_that_changed():
    from experiments.mini.report import sign_test_p

    assert sign_test_p(8, 4) == pytest.approx(794 / 2048)  # 2 x P(X >= 8), X ~ Binomial(12, 1/2)
    assert sign_test_p(4, 8) == sign_test_p(8, 4) and sign_test_p(6, 6) == 1.0 and sign_test_p(0, 0) == 1.0
    assert sign_test_p(10, 0) == pytest.approx(2 / 1024)


def test_paired_counts_add_up_over_run_folders(tmp_path):
    """Each run's RL checkpoints against its SFT model, then the sums over runs with their sign test; a
    folder without evaluations, one not matching the pattern, an evaluation without counts, the
    shuffled-advantage control and an arm's earlier point add nothing."""
    from experiments.mini.report import paired_rows, paired_rows_of_runs, read_run

    def write(run, checkpoint, after, before, both=5, neither=10):
        folder = tmp_path / run
        folder.mkdir(exist_ok=True)
        counts = {"episodes": after + before + both + neither, "solved_by_both": both, "solved_only_before": before,
                  "solved_only_after": after, "solved_by_neither": neither}
        (folder / f"eval_{checkpoint}.json").write_text(json.dumps({"heldout": {"paired_with_sft": counts}}))

    write("h200_a", "rl_trloo", 1, 7)
    write("h200_a", "rl_grpo", 2, 2)
    write("h200_b", "rl_trloo", 0, 3)
    write("cpu_c", "rl_trloo", 9, 0)
    write("h200_b", "rl_shuffled", 0, 9)  # the control: no RL signal, so not in the sums
    write("h200_b", "rl_trloo_step6", 0, 9)  # an earlier point of h200_b's TRLOO arm: its episodes counted once
    write("h200_c", "rl_long_step16", 2, 1)  # an arm carried on whose later end was never evaluated: counted
    (tmp_path / "h200_a" / "eval_sft.json").write_text(json.dumps({"heldout": {"correct_rate": 0.5}}))
    # GRPO against TRLOO as well: a row of its own with against_rl, never in the sums against SFT
    grpo = json.loads((tmp_path / "h200_a" / "eval_rl_grpo.json").read_text())
    grpo["heldout"]["paired_with_rl"] = {"rl_trloo": {**grpo["heldout"]["paired_with_sft"], "solved_only_after": 30}}
    (tmp_path / "h200_a" / "eval_rl_grpo.json").write_text(json.dumps(grpo))
    (against,) = paired_rows(read_run(tmp_path / "h200_a"), "heldout", against_rl=True)
    assert (against["checkpoint"], against["against"], against["solved_only_after"]) == ("rl_grpo", "rl_trloo", 30)
    (tmp_path / "h200_empty").mkdir()
    rows = paired_rows_of_runs(tmp_path, "heldout", pattern="h200_*")
    assert [row["checkpoint"] for row in rows] == ["h200_a/rl_grpo", "h200_a/rl_trloo", "h200_b/rl_trloo",
                                                   "h200_c/rl_long_step16", "all"]
    total = rows[-1]
    assert (total["solved_only_after"], total["solved_only_before"], total["episodes"]) == (5, 13, 4 * 15 + 18)
    assert total["sign_test_p"] == pytest.approx(2 * sum(math.comb(18, i) for i in range(6)) / 2**18)
    assert paired_rows_of_runs(tmp_path, "seen") == []


def test_an_operator_drill_holds_the_forward_and_the_kernels_chain():
    """A drill is the task's forward lines as the prompt writes them, then the kernel's chain as the teacher
    writes it: the same operators in the same order, which chain_written reads back."""
    from drk_lab.data.kernels_rows import chain_wanted, chain_written
    from drk_lab.data.spec import TaskSpec, forward_lines
    from experiments.mini.texts import operator_drill

    sizes = (("batch_size", 8), ("in_features", 16), ("out_features", 32))
    spec = TaskSpec(2, "linear", ("bias", "leaky_relu:0.2", "residual", "clamp:0.5"), "bfloat16", sizes, sizes)
    drill = operator_drill(spec)
    assert all(f"        {line}\n" in drill for line in forward_lines(spec))
    assert chain_written(drill) == chain_wanted(spec) and len(chain_wanted(spec)) == 4
    assert drill.index("return y") < drill.index("v = h") and len(drill) < 1500


@pytest.mark.parametrize("head", ["linear", "conv"])
def test_an_epilogue_drill_holds_the_lines_the_teachers_second_reply_fuses(head):
    """The epilogue form: the forward's lines, then the GEMM or conv tile's epilogue exactly as the
    teacher's second reply writes it (its chain read back by chain_written), and not the first reply's
    separate chain kernel."""
    from drk_lab.data.generator import sample_specs
    from drk_lab.data.kernels_gemm import epilogue_lines
    from drk_lab.data.kernels_rows import chain_wanted, chain_written
    from drk_lab.data.spec import forward_lines
    from drk_lab.data.teacher import answer
    from experiments.mini.texts import operator_drill

    (spec,) = sample_specs(1, seed=3, keep=lambda s: s.head == head and s.dtype != "float32" and "bias" in s.steps
                           and len(chain_wanted(s)) >= 3)
    drill = operator_drill(spec, epilogue=True)
    assert all(f"        {line}\n" in drill for line in forward_lines(spec))
    assert chain_written(drill) == chain_wanted(spec)
    second, first = answer(spec, 2), answer(spec, 1)
    tile = "\n".join(f"    {line}" for line in epilogue_lines(spec))
    assert tile in drill and tile in second and tile not in first
    assert "x_ptr" not in drill


def test_the_drill_check_trains_and_scores_a_small_model(tmp_path):
    """experiments/drills/learnability.py end to end with 2 steps: it trains on drills, writes chains for trained
    and held-out tasks and counts them; a missing prompt set is one line."""
    script = REPO / "experiments" / "drills" / "learnability.py"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    done = subprocess.run([sys.executable, str(script), "--steps", "2", "--drills", "40", "--epilogue-drills", "10",
                           "--chains", "3"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["drills"] == 40 and report["epilogue_drills"] == 10
    assert report["steps"] == 2 and report["last_loss"] > 0
    assert 1 <= report["heldout_combinations_epilogue"]["chains"] <= 3  # the held-out tasks with a head
    for part in ("trained_drills", "heldout_combinations"):
        counts = report[part]
        assert counts["chains"] == 3 and 0 <= counts["exact"] <= 3
        assert sum(v for k, v in counts.items() if k.startswith("position 0")) >= (3 if part == "heldout_combinations" else 0)
    # the prompt is a prefix of the drill's own tokens, cut where the next token starts the next line
    from drk_lab.data.export import read_rl_tasks
    from drk_lab.rl.tiny_model import train_tokenizer
    from experiments.drills.learnability import drill_prompt
    from experiments.mini.texts import operator_drill

    specs = [spec for spec, _, _ in read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz", split="heldout")[:20]]
    tokenizer = train_tokenizer(1024, corpus=[operator_drill(s) for s in specs])
    for spec, epilogue in [(spec, False) for spec in specs] + [(spec, True) for spec in specs if spec.head]:
        whole = tokenizer(operator_drill(spec, epilogue), add_special_tokens=False)["input_ids"]
        prompt = drill_prompt(tokenizer, spec, epilogue)
        assert whole[: len(prompt)] == prompt and tokenizer.decode(prompt).endswith("v = h")
        assert tokenizer.decode(whole[len(prompt)]).startswith("\n")
    missing = subprocess.run([sys.executable, str(script), "--rl-data", str(tmp_path / "none.jsonl.gz")],
                             capture_output=True, text=True, env=env, timeout=120)
    assert missing.returncode == 1 and "none.jsonl.gz: no such file" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_export_copies_only_the_small_files(smoke):
    exported = {p.relative_to(smoke / "export").as_posix() for p in (smoke / "export").rglob("*") if p.is_file()}
    assert {"genbench.json", "eval_sft.json", "eval_rl_trloo.json", "rl_trloo/log/metrics.jsonl"} <= exported
    assert not any(p.endswith((".safetensors", ".bin", ".pt")) for p in exported)


def test_rl_resumes_from_its_checkpoint_and_the_ablation_and_other_seeds_get_their_own_folders(smoke):
    run_dir = smoke / "run"
    first = read(run_dir / "rl_trloo.json")
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", "--set", "rl.steps=2", "--set", "rl.snapshot_step=2")
    rl = read(run_dir / "rl_trloo.json")
    assert rl["steps_done"] == 2 and rl["resumed"]
    assert rl["seconds"] > first["seconds"] and rl["rl_seconds"] > first["rl_seconds"]  # both calls' time
    # the call's own --set is in the phase's JSON; settings.json keeps the run's first settings
    assert rl["set"] == ["rl.steps=2", "rl.snapshot_step=2"]
    assert read(run_dir / "settings.json")["settings"]["rl"]["steps"] == 1
    # the snapshot of step 2, here the last step, holds the exported model's weights
    from safetensors.torch import load_file

    snapshot, final = (load_file(run_dir / name / "model" / "model.safetensors") for name in ("rl_trloo_step2", "rl_trloo"))
    assert snapshot.keys() == final.keys() and all(torch.equal(snapshot[k], final[k]) for k in final)
    assert not (run_dir / "rl_trloo_step1").exists()  # step 1 ran in the first call, without a snapshot
    steps = [json.loads(x)["step"] for x in (run_dir / "rl_trloo" / "log" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert [counts["step"] for counts in rl["chain_per_step"]] == [1, 2]  # the first call's step is kept
    assert not rl["stopped_by_time_limit"] and not rl["stopped_by_budget"]
    # the rollouts' caught replies, step by step, summed by check in the phase's JSON
    caught = [json.loads(x) for x in (run_dir / "rl_trloo" / "hacks.jsonl").read_text().splitlines()]
    assert rl["hacks_by_check"] == dict(Counter(r for row in caught for r in row["reasons"]))
    assert {row["step"] for row in caught} <= {1, 2}
    # the ablation and its evaluation in one call (the phases' imports and prompt set are read once)
    run("--config", "smoke", "--out", run_dir, "--phase", "rl,eval", "--advantage", "grpo", "--prs", "off", "--set", "rl.seed=1",
        "--checkpoint", "rl_grpo_noprs_seed1", "--set", "eval.stts_tasks=0", "--set", "eval.builtin_levels=()")
    assert read(run_dir / "rl_grpo_noprs_seed1.json")["steps_done"] == 1  # its own folder, from the same SFT model
    assert (run_dir / "rl_grpo_noprs_seed1" / "model" / "config.json").exists()
    # its evaluation is paired with SFT's and, episode by episode, with TRLOO's (evaluated before it)
    from drk_lab.agent.trajectory import read_jsonl
    from experiments.mini.report import paired_comparison

    heldout = read(run_dir / "eval_rl_grpo_noprs_seed1.json")["heldout"]
    assert list(heldout["paired_with_rl"]) == ["rl_trloo"]
    assert heldout["paired_with_rl"]["rl_trloo"] == paired_comparison(
        read_jsonl(run_dir / "eval_rl_trloo_heldout.jsonl"), read_jsonl(run_dir / "eval_rl_grpo_noprs_seed1_heldout.jsonl"))
    assert heldout["paired_with_rl"]["rl_trloo"]["episodes"] == heldout["episodes"]
    assert "paired_with_rl" not in read(run_dir / "eval_rl_trloo.json")["heldout"]  # nothing before it
    # the whole train split, or only its first N prompts (the seen evaluation's first N) every step
    (rl_data,) = data()["--rl-data"]
    with gzip.open(rl_data, "rt") as f:
        assert rl["train_prompts"] == sum(json.loads(line)["split"] == "train" for line in f) > 500
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", "--tag", "trloo_p1", "--set", "rl.prompts=1")
    assert read(run_dir / "rl_trloo_p1.json")["train_prompts"] == 1


def test_held_out_probes_during_rl_pair_with_the_arms_start_and_come_back_with_the_small_files(smoke, tmp_path):
    """rl_probe_every=2: a probe before the first step and after the second, each on the evaluation's first
    rl_probe_tasks held-out tasks with its sampling seed; the later one paired episode by episode with
    the first; the summaries are in probes.jsonl and the phase's JSON, the trajectories stay behind."""
    run_dir = smoke / "run"
    run("--config", "smoke", "--out", run_dir, "--export", tmp_path / "export", "--phase", "rl", "--tag", "trloo_probed",
        "--set", "rl.steps=2", "--set", "rl.probe_every=2", "--set", "rl.kl_coef=0.1")
    rl = read(run_dir / "rl_trloo_probed.json")
    from drk_lab.rl.runlog import read_log

    assert all(row["ref_kl"] >= 0 for row in read_log(run_dir / "rl_trloo_probed" / "log"))  # rl_kl_coef reached RL
    assert rl["steps_done"] == 2 and [row["step"] for row in rl["probes"]] == [0, 2]
    start, later = rl["probes"]
    assert start["episodes"] == later["episodes"] == 2 and "paired_with_first" not in start
    assert later["paired_with_first"]["step"] == 0 and later["paired_with_first"]["episodes"] == 2
    # the probe's tasks are the evaluation's first held-out tasks, in its order
    from drk_lab.agent.trajectory import read_jsonl

    probed = [t.task for t in read_jsonl(run_dir / "rl_trloo_probed" / "probe" / "step_000000.jsonl")]
    evaluated = [t.task for t in read_jsonl(run_dir / "eval_sft_heldout.jsonl")]
    assert probed == list(dict.fromkeys(evaluated))[:2]
    exported = tmp_path / "export" / "rl_trloo_probed"
    assert [json.loads(x)["step"] for x in (exported / "probes.jsonl").read_text().splitlines()] == [0, 2]
    assert not (exported / "probe").exists()
    from experiments.mini.report import probe_rows, read_run

    rows = probe_rows(read_run(tmp_path / "export"))
    assert [(row["run"], row["step"]) for row in rows] == [("trloo_probed", 0), ("trloo_probed", 2)]
    assert "sign_test_p" not in rows[0] and rows[1]["first_step"] == 0 and 0 < rows[1]["sign_test_p"] <= 1
    assert rows[1]["correct_rate"] == later["correct_rate"]


def test_rl_stops_on_its_budget_across_calls(smoke):
    """rl_budget_s counts the RL steps of every call: a run whose first step used it up is finished (the
    next call trains nothing), while a call's own time limit leaves it to resume."""
    run_dir = smoke / "run"
    budget = ("--set", "rl.steps=5", "--set", "rl.budget_s=0.001", "--set", "rl.seed=2")
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", *budget)
    first = read(run_dir / "rl_trloo_seed2.json")
    assert first["steps_done"] == 1 and first["stopped_by_budget"] and not first["stopped_by_time_limit"]
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", *budget)
    again = read(run_dir / "rl_trloo_seed2.json")
    assert again["steps_done"] == 1 and again["resumed"] and again["rl_seconds"] == first["rl_seconds"]
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", "--set", "rl.steps=5", "--set", "rl.time_limit_s=0.001",
        "--set", "rl.seed=3")
    limited = read(run_dir / "rl_trloo_seed3.json")
    assert limited["steps_done"] == 1 and limited["stopped_by_time_limit"] and not limited["stopped_by_budget"]


def test_rollouts_and_evaluations_at_another_temperature(smoke):
    """rl.temperature reaches the trainer (its rollouts scored at that temperature: no mismatch);
    eval_temperature away from the default names the evaluation <checkpoint>_temp<T> and pairs it with the
    SFT model's evaluation at the same temperature, leaving those at the default as they were; the table
    over runs counts each arm once; tables list each temperature's evaluations together."""
    from drk_lab.agent.trajectory import read_jsonl
    from experiments.mini.report import checkpoint_order, headline_rows, paired_comparison, paired_rows_of_runs, read_run
    from drk_lab.rl.runlog import read_log

    run_dir = smoke / "run"
    run("--config", "smoke", "--out", run_dir, "--phase", "rl", "--tag", "trloo_07", "--set", "rl.temperature=0.7")
    (row,) = read_log(run_dir / "rl_trloo_07" / "log")
    assert row["mrs/log_ratio_abs_max"] < 1e-3 and row["generated_tokens"] > 0
    (trainer_json,) = (run_dir / "rl_trloo_07" / "ckpt").glob("step_*/trainer.json")
    assert read(trainer_json)["settings"]["rollouts"]["temperature"] == 0.7
    before = (run_dir / "eval_sft.json").read_text()
    # no --checkpoint: the SFT model, then rl_trloo (the default arm), in one call
    run("--config", "smoke", "--out", run_dir, "--phase", "eval", "--set", "eval.stts_tasks=0",
        "--set", "eval.builtin_levels=()", "--set", "eval.temperature=1.0")
    assert (run_dir / "eval_sft.json").read_text() == before and read(run_dir / "eval_sft.json")["temperature"] == 0.7
    sft_t1, rl_t1 = read(run_dir / "eval_sft_temp1.json"), read(run_dir / "eval_rl_trloo_temp1.json")
    assert sft_t1["temperature"] == rl_t1["temperature"] == 1.0 and "paired_with_sft" not in sft_t1["heldout"]
    assert rl_t1["heldout"]["paired_with_sft"] == paired_comparison(
        read_jsonl(run_dir / "eval_sft_temp1_heldout.jsonl"), read_jsonl(run_dir / "eval_rl_trloo_temp1_heldout.jsonl"))
    assert "paired_with_rl" not in rl_t1["heldout"]  # the arms evaluated at 0.7 are not its kind
    first_reply = {name: [t.turns[0].response for t in read_jsonl(run_dir / f"eval_{name}_heldout.jsonl")]
                   for name in ("sft", "sft_temp1")}
    assert first_reply["sft"] != first_reply["sft_temp1"]  # the temperature reached the sampler
    checkpoints = [row["checkpoint"] for row in paired_rows_of_runs(smoke, pattern="run")]
    assert "run/rl_trloo" in checkpoints and not any(name.endswith("_temp1") for name in checkpoints)
    # tables and plots: each temperature's evaluations together, the SFT model's first
    names = [row["checkpoint"] for row in headline_rows(read_run(run_dir))]
    assert names[0] == "sft" and names[-2:] == ["sft_temp1", "rl_trloo_temp1"]
    assert checkpoint_order(["sft_temp1", "rl_grpo", "rl_trloo_temp0.5", "sft", "sft_temp0.5"]) == [
        "sft", "rl_grpo", "sft_temp0.5", "rl_trloo_temp0.5", "sft_temp1"]


def test_a_run_carried_in_parts_to_a_fresh_machine_resumes_its_arm(smoke, tmp_path):
    """experiments/mini/carry.sh: the run's state leaves one machine in parts over several calls, comes back
    here, travels to a fresh machine three parts a call and, checked against its checksum, is unpacked
    there; the arm then resumes from its last checkpoint, and its new end is paired with its earlier
    end (now named as a point of the arm). Each folder is a repository copy holding only the script."""
    carry = REPO / "experiments" / "mini" / "carry.sh"

    def machine(name):
        root = tmp_path / name
        (root / "experiments" / "mini").mkdir(parents=True)
        shutil.copy(carry, root / "experiments" / "mini")
        return root

    def sh(root, *args, out=None, check=True):
        env = {**os.environ, "TAG": "trloo", "PART_SIZE": "200K", "OUT": str(out or tmp_path)}
        done = subprocess.run(["bash", str(root / "experiments" / "mini" / "carry.sh"), *args], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0 or not check, done.stderr
        return done

    first, here, fresh = machine("first"), machine("here"), machine("fresh")
    shutil.copytree(smoke / "run", first / "runs" / "mini")
    step = read(first / "runs" / "mini" / "rl_trloo.json")["steps_done"]
    calls = []
    for k in range(10):
        (out := tmp_path / f"out{k}").mkdir()
        said = sh(first, "out", str(k), out=out).stdout
        calls.append(sorted(p.name for p in out.iterdir()))
        sh(here, "keep", str(out))
        if "all parts are out" in said:
            break
    parts = int((here / ".carry" / "parts" / "manifest").read_text().split("parts=")[1].split()[0])
    assert len(calls) > 1 and all(len(names) <= 6 for names in calls)  # at most 5 parts and the manifest a call
    assert sum(len(names) - 1 for names in calls) == parts
    # the first call's parts put together: the arm's last checkpoint and no other, none of the models
    # no later phase reads, and the arm's end renamed as its earlier point
    import io
    import tarfile

    stream_whole = b"".join(p.read_bytes() for p in sorted((here / ".carry" / "parts").glob("part-*")))
    names = set(tarfile.open(fileobj=io.BytesIO(stream_whole), mode="r:gz").getnames())
    checkpoints = sorted(n for n in names if n.startswith("./rl_trloo/ckpt/step_") and n.count("/") == 3)
    assert checkpoints == [f"./rl_trloo/ckpt/step_{step:06d}"]
    assert "./sft/model.safetensors" in names and "./init/config.json" in names
    assert not any("/model/" in n or n.startswith("./pretrain/") or n == "./init/model.safetensors" for n in names)
    assert {f"./rl_trloo_step{step}.json", f"./eval_rl_trloo_step{step}.json",
            f"./eval_rl_trloo_step{step}_heldout.jsonl"} <= names
    assert "./rl_trloo.json" not in names and "./eval_rl_trloo_heldout.jsonl" not in names
    # to the fresh machine: three parts a call; the last call unpacks
    sent = []
    while True:
        said = sh(here, "next", check=False)
        if said.returncode:
            assert "every part was sent already" in said.stderr and len(said.stderr.splitlines()) == 1
            break
        shutil.rmtree(fresh / ".carry", ignore_errors=True)
        shutil.copytree(here / ".carry" / "next", fresh / ".carry" / "next")
        sent.append(sh(fresh, "in").stdout)
    assert len(sent) == -(-parts // 3) and "unpacked" in sent[-1] and "unpacked" not in sent[0]
    run_dir = fresh / "runs" / "mini"
    assert not (fresh / "runs" / "carried").exists()
    run("--config", "smoke", "--out", run_dir, "--phase", "rl,eval", "--set", f"rl.steps={step + 1}", "--checkpoint", "rl_trloo",
        "--set", "eval.stts_tasks=0", "--set", "eval.builtin_levels=()")
    resumed = read(run_dir / "rl_trloo.json")
    assert resumed["steps_done"] == step + 1 and resumed["resumed"]
    metrics = (run_dir / "rl_trloo" / "log" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in metrics] == list(range(1, step + 2))
    assert f"rl_trloo_step{step}" in read(run_dir / "eval_rl_trloo.json")["heldout"]["paired_with_rl"]
    # a new arm needs only the SFT model: the parts cut down to it here (the whole state kept) go to
    # another fresh machine in fewer calls, and an arm with the KL penalty starts there at step 0
    said = sh(here, "sft").stdout
    assert "parts hold the SFT model" in said
    assert len(list((here / ".carry" / "whole").glob("part-*"))) == parts
    stream = b"".join(p.read_bytes() for p in sorted((here / ".carry" / "parts").glob("part-*")))
    cut = set(tarfile.open(fileobj=io.BytesIO(stream), mode="r:gz").getnames())
    assert "./sft/model.safetensors" in cut and "./eval_sft.json" in cut
    assert not any(n.startswith(("./rl_", "./eval_rl_")) for n in cut) and len(stream) < len(stream_whole)
    again = sh(here, "sft", check=False)
    assert again.returncode == 2 and "cut down already" in again.stderr
    second = machine("second")
    while (said := sh(here, "next", check=False)).returncode == 0:
        shutil.rmtree(second / ".carry", ignore_errors=True)
        shutil.copytree(here / ".carry" / "next", second / ".carry" / "next")
        last = sh(second, "in").stdout
    assert "holds the SFT model and its evaluations" in last
    kl_dir = second / "runs" / "mini"
    run("--config", "smoke", "--out", kl_dir, "--phase", "rl", "--tag", "trloo_kl", "--set", "rl.steps=1",
        "--set", "rl.kl_coef=0.1")
    other = read(kl_dir / "rl_trloo_kl.json")
    assert other["steps_done"] == 1 and not other["resumed"] and not (kl_dir / "rl_trloo.json").exists()
    # parts that do not add up to the manifest's checksum are refused, and nothing is unpacked
    broken = machine("broken")
    shutil.copytree(here / ".carry" / "parts", broken / ".carry" / "next")
    (broken / ".carry" / "next" / "part-000").write_bytes(b"not the run")
    said = sh(broken, "in", check=False)
    assert said.returncode == 1 and "checksum differs" in said.stderr and not (broken / "runs" / "mini").exists()
    assert not (broken / "runs" / "carried").exists()  # the broken parts are not kept for the next try


def test_a_call_meant_to_continue_a_run_stops_on_a_fresh_machine(tmp_path):
    """CONTINUE=1 experiments/mini/device.sh on a machine without the run (the one that held it went back) says so in one line and leaves no runs/mini behind, which would block unpacking a carried run."""
    (tmp_path / "experiments" / "mini").mkdir(parents=True)
    shutil.copy(REPO / "experiments" / "mini" / "device.sh", tmp_path / "experiments" / "mini")
    env = {**os.environ, "CONTINUE": "1", "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(tmp_path / "experiments" / "mini" / "device.sh"), "585"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert "holds no run" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "runs").exists()


def test_a_carried_sft_run_goes_on_from_the_sft_model(smoke, tmp_path):
    """experiments/mini/device.sh on a carried run that holds the SFT model but no pretrained one (what
    experiments/mini/carry.sh carries) starts at the evaluation after SFT: no tokenizer or pretraining phase
    runs again. The budget leaves no time for RL after it, so the call stops there."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("drk_lab", "data", "experiments"):
        (root / name).symlink_to(REPO / name)
    run_dir = root / "runs" / "mini"
    shutil.copytree(smoke / "run" / "sft", run_dir / "sft")
    shutil.copytree(smoke / "run" / "init", run_dir / "init", ignore=shutil.ignore_patterns("*.safetensors"))
    shutil.copy(smoke / "run" / "settings.json", run_dir)
    env = {**os.environ, "CONTINUE": "1", "EVAL_SECONDS": "1", "OUT": str(tmp_path / "out"), "TQDM_DISABLE": "1",
           "CUDA_VISIBLE_DEVICES": "", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    (tmp_path / "out").mkdir()
    done = subprocess.run(["bash", str(root / "experiments" / "mini" / "device.sh"), "175", "--config", "smoke", "--set", "eval.seen=0",
                           "--set", "eval.builtin_levels=()", "--set", "eval.stts_tasks=0", *map(str, data_args())],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    phases = [line for line in done.stdout.splitlines() if line.startswith("== --phase")]  # the script's own lines
    assert len(phases) == 1 and phases[0].startswith("== --phase eval --checkpoint sft"), done.stdout
    assert "stopped:" in done.stdout and (run_dir / "eval_sft.json").exists()
    assert not (run_dir / "pretrain").exists() and not (run_dir / "tokenizer.json").exists()


@pytest.mark.parametrize("args, message", [
    (("--phase", "bogus"), "unknown phase 'bogus'"),
    (("--set", "nope=1"), "--set 'nope=1'"),
    (("--phase", "rl"), "run --phase sft first"),
    (("--phase", "tokenizer", "--sft-data", "missing.parquet"), "missing.parquet: no such file"),
    (("--phase", "sft", "--model", "not_a_model"), "not a local Hugging Face model folder"),
    pytest.param(("--phase", "baselines"), "baselines are GPU timings",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="measures baselines on a GPU")),
])
def test_everyday_mistakes_get_one_line(tmp_path, args, message):
    done = run("--config", "smoke", "--out", tmp_path / "empty", *args, check=False)
    assert done.returncode == 2
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_first_turn_texts_are_the_sft_sets_first_turns(smoke):
    """Pretraining's extra texts are built as the SFT set's first turns were: the same prompt, the same
    teacher reply, the same chat template."""
    from transformers import AutoTokenizer

    from drk_lab.data.export import read_rl_tasks
    from experiments.mini.texts import first_turn_texts

    tokenizer = AutoTokenizer.from_pretrained(smoke / "run" / "init")
    sft = pd.read_parquet(REPO / "data" / "sft" / "sft.parquet").head(3)
    by_name = {task.name: (spec, task) for spec, task, _ in read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz",
                                                                         split="train")}
    texts = first_turn_texts([by_name[name][0] for name in sft["task"]], tokenizer)
    expected = [tokenizer.apply_chat_template(list(messages[:2]), tokenize=False) for messages in sft["messages"]]
    assert texts == expected and all("```python" in t for t in texts)



def test_fresh_pretraining_tasks_never_take_a_heldout_combination():
    """The tasks sampled afresh for pretraining are new (none of the RL set's), their combinations are the
    set's train combinations or new ones its split rule puts in train, and they add combinations."""
    import json as json_

    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.splits import combinations_by_split, is_heldout
    from experiments.mini.texts import fresh_train_specs

    rows = read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz")
    rule = json_.loads((REPO / "data" / "rl" / "summary.json").read_text())
    known = combinations_by_split([row for _, _, row in rows])
    fresh = fresh_train_specs(2000, rows, rule["heldout_fraction"], rule["seed"], seed=1)
    assert len(fresh) == 2000 and len({s.key for s in fresh}) == 2000
    assert not {s.key for s in fresh} & {spec.key for spec, _, _ in rows}
    combos = {s.combination for s in fresh}
    assert not combos & known["heldout"] and not any(is_heldout(c, rule["heldout_fraction"], rule["seed"]) for c in combos)
    assert combos - known["train"]  # combinations the set does not hold
    # without the set's split rule, only its own train combinations are taken
    strict = fresh_train_specs(300, rows, None, 0, seed=1)
    assert {s.combination for s in strict} <= known["train"]
    # the epilogue drills' tasks: each with a head, the same rule
    headed = fresh_train_specs(300, rows, rule["heldout_fraction"], rule["seed"], seed=2, with_head=True)
    assert len(headed) == 300 and {s.head for s in headed} == {"linear", "conv"}
    assert not {s.combination for s in headed} & known["heldout"]


def test_pretraining_rows_hold_whole_texts(smoke):
    """Every text that fits in a row lies whole in one row (a reply is never split from its prompt), every
    token of every text is there once, and padding carries no loss."""
    from transformers import AutoTokenizer

    from drk_lab.rl.pretrain import packed_rows

    tokenizer = AutoTokenizer.from_pretrained(smoke / "run" / "init")
    texts = [f"task {i}: " + "relu(x) " * (i * 7 % 20) for i in range(60)] + ["long " * 300]
    rows = packed_rows(texts, tokenizer, length=127)
    eos = tokenizer.pad_token_id
    pieces = [ids + [eos] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    assert rows.shape[1] == 128 and all(len(p) <= 128 for p in pieces[:-1]) and len(pieces[-1]) > 128
    filled = []
    for row in rows.tolist():
        n = row.index(-100) if -100 in row else len(row)
        assert set(row[n:]) <= {-100}  # padding only at the end of a row
        filled.append("," + ",".join(map(str, row[:n])) + ",")
    for piece in pieces[:-1]:
        assert any("," + ",".join(map(str, piece)) + "," in row for row in filled)
    assert int((rows != -100).sum()) == sum(map(len, pieces))  # every token once


def test_pretraining_stopped_by_a_time_limit_resumes_to_the_same_model(smoke, tmp_path):
    """Pretraining cut into calls of one step each (the first step of a call always runs; a limit already
    passed stops it after that) keeps its state beside the model folder, never a model in it, and ends
    with the losses and weights of one uninterrupted run, to the bit on a CPU."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from drk_lab.rl.pretrain import checkpoint_path, packed_rows, pretrain

    init = smoke / "run" / "init"
    texts = [f"task {i}: " + "relu(x) " * (i * 7 % 20) for i in range(40)]
    rows = packed_rows(texts, AutoTokenizer.from_pretrained(init), length=63)
    kw = dict(steps=4, batch=2, lr=1e-3, seed=3, progress=False)
    whole = pretrain(init, rows, tmp_path / "whole", **kw)
    calls = []
    while not calls or not calls[-1]["finished"]:
        calls.append(pretrain(init, rows, tmp_path / "cut", time_limit_s=1e-9, **kw))
        assert (tmp_path / "cut" / "config.json").exists() == calls[-1]["finished"]
        assert checkpoint_path(tmp_path / "cut").exists() != calls[-1]["finished"]
    assert [c["steps_done"] for c in calls] == [1, 2, 3, 4] and [c["resumed"] for c in calls] == [False] + [True] * 3
    assert calls[-1]["loss"] == whole["loss"] and len(set(whole["loss"])) == 4
    a, b = (AutoModelForCausalLM.from_pretrained(tmp_path / name) for name in ("whole", "cut"))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert (tmp_path / "cut" / "tokenizer.json").exists()


def test_a_phase_stopped_by_its_time_limit_blocks_the_next_until_resumed(smoke, tmp_path):
    """Through the script: pretraining and SFT stopped at a call's limit say so in their JSON, a later
    phase refuses to start from the unfinished model in one line, and the same phase again finishes it,
    its seconds summed over both calls."""
    out = tmp_path / "run"
    shutil.copytree(smoke / "run" / "init", out / "init")
    stop = ("--set", "pretrain.time_limit_s=1e-9", "--set", "sft.time_limit_s=1e-9")
    run("--config", "smoke", "--out", out, "--phase", "pretrain,sft", *stop)  # 'all' would stop after pretraining too
    first = read(out / "pretrain.json")
    assert first["stopped_by_time_limit"] and first["steps_done"] == 1 and "reads_the_task" not in first
    assert not (out / "sft.json").exists()
    refused = run("--config", "smoke", "--out", out, "--phase", "sft", check=False)
    assert refused.returncode == 2 and "pretraining stopped at a call's time limit" in refused.stderr
    run("--config", "smoke", "--out", out, "--phase", "pretrain", "--set", "eval.seen=0")  # 0: no seen tasks, not all
    done = read(out / "pretrain.json")
    assert list(done["reads_the_task"]) == ["heldout", "heldout_drills", "heldout_epilogue_drills"]
    assert not done["stopped_by_time_limit"] and done["resumed"] and len(done["loss"]) == 2
    assert done["loss"][0] == first["loss"][0] and done["seconds"] > first["seconds"] and "reads_the_task" in done
    run("--config", "smoke", "--out", out, "--phase", "sft", *stop)
    cut = read(out / "sft.json")
    assert cut["stopped_by_time_limit"] and len(cut["loss"]) == 1 and not (out / "sft" / "config.json").exists()
    assert "run --phase sft first" in run("--config", "smoke", "--out", out, "--phase", "rl", check=False).stderr
    run("--config", "smoke", "--out", out, "--phase", "sft")
    sft = read(out / "sft.json")
    assert not sft["stopped_by_time_limit"] and sft["resumed"] and len(sft["loss"]) == 2 and "reads_the_task" in sft
    assert (out / "sft" / "config.json").exists() and not list((out / "sft").glob("checkpoint-*"))


def test_teacher_forced_scoring_lines_up_each_guess_with_the_next_reply_token(smoke):
    """A model that sees the next token scores every reply and drill exact; one that repeats the current
    token does not. (The prompt's tokens are never scored: a model right only on the reply is exact.)"""
    import torch
    from transformers import AutoTokenizer

    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted
    from experiments.mini.model import teacher_forced_drills, teacher_forced_replies
    from experiments.mini.texts import operator_drill

    tokenizer = AutoTokenizer.from_pretrained(smoke / "run" / "init")
    specs = [spec for spec, _, _ in read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz", split="heldout")[:2]]

    class Oracle(torch.nn.Module):
        def __init__(self, shift: int):
            super().__init__()
            self.shift, self.weight = shift, torch.nn.Parameter(torch.zeros(1))

        def forward(self, input_ids):
            target = torch.roll(input_ids, -self.shift, dims=1)
            return type("Out", (), {"logits": torch.nn.functional.one_hot(target, len(tokenizer)).float()})

    right = teacher_forced_replies(Oracle(1), tokenizer, specs)
    assert right == {"replies": 2, "exact_share": 1.0, "errors_median": 0, "token_accuracy": 1.0}
    wrong = teacher_forced_replies(Oracle(0), tokenizer, specs)
    assert wrong["exact_share"] == 0.0 and wrong["errors_median"] > 100 and wrong["token_accuracy"] < 0.5
    # drills: only the chain's tokens are scored (those after the kernel's `v = h` up to its store)
    headed = [spec for spec, _, _ in read_rl_tasks(REPO / "data" / "rl" / "prompts.jsonl.gz", split="heldout")
              if spec.head and chain_wanted(spec)][:3]
    for epilogue in (False, True):
        assert teacher_forced_drills(Oracle(1), tokenizer, headed, epilogue) == {
            "drills": 3, "exact_share": 1.0, "errors_median": 0, "token_accuracy": 1.0}
        wrong = teacher_forced_drills(Oracle(0), tokenizer, headed, epilogue)
        chains = sorted(len(tokenizer(d[d.index("v = h\n") + 5: d.index("    tl.store")])["input_ids"])
                        for d in (operator_drill(spec, epilogue) for spec in headed))
        assert wrong["exact_share"] == 0.0 and 0 < wrong["errors_median"] <= chains[1] + 1


def test_second_reply_answers_recorded_first_turns_with_another_model(smoke, tmp_path):
    """experiments/mini/second_reply.py keeps the episodes whose first reply wrote the task's chain, rebuilds what their
    second turn saw, and counts the new model's second replies beside the recorded ones."""
    from drk_lab.agent.trajectory import Trajectory, Turn, write_jsonl
    from drk_lab.data.export import read_rl_tasks
    from drk_lab.data.kernels_rows import chain_wanted, chain_written
    from drk_lab.data.teacher import solution
    from drk_lab.harness.result import EvalResult

    from experiments.mini.second_reply import kept_contexts

    rl_data = REPO / "data" / "rl" / "prompts.jsonl.gz"
    headed = [(spec, task) for spec, task, _ in read_rl_tasks(rl_data, split="heldout")
              if spec.head and len(chain_wanted(spec)) >= 2][:3]
    (a, task_a), (b, task_b), (c, task_c) = headed
    assert chain_wanted(a) not in (chain_wanted(b), chain_wanted(c))
    assert chain_written(solution(a, 1)) == chain_wanted(a)

    def turn(i, code, feedback):
        return Turn(task="", index=i, iteration=0, context=[0] if i else [], prompt_tokens=0, prompt_chars=0,
                    response=f"reply {i}\n```python\n{code}```", finish_reason="stop", extraction="ok",
                    code=code, result=EvalResult(compiled=True, correct=True), reward=1.0, feedback=feedback)

    def episode(task, first, second, letter):
        return Trajectory(task.name, f"prompt {letter}", [turn(0, first, f"fine {letter}"), turn(1, second, "")])

    episodes = [episode(task_a, solution(a, 1), solution(a, 2), "a"),  # the chain kept
                episode(task_b, solution(b, 1), solution(a, 2), "b"),  # lost: the second reply has a's chain
                episode(task_c, solution(a, 1), solution(c, 2), "c")]  # wrong in the first reply: left out
    path = tmp_path / "eval_sft_heldout.jsonl"
    write_jsonl(episodes, path)
    rows = kept_contexts(path, rl_data)
    assert [r["task"] for r in rows] == [task_a.name, task_b.name]
    assert [r["recorded_kept"] for r in rows] == [True, False]
    assert [m["role"] for m in rows[1]["messages"]] == ["user", "assistant", "user"]
    assert rows[1]["messages"][0]["content"] == "prompt b" and rows[1]["messages"][2]["content"] == "fine b"
    assert rows[1]["messages"][1]["content"].startswith("reply 0")

    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "", "TQDM_DISABLE": "1"}
    report_path = tmp_path / "report.json"
    script = [sys.executable, str(REPO / "experiments" / "mini" / "second_reply.py"), "--model", str(smoke / "run" / "sft")]
    done = subprocess.run([*script, "--trajectories", str(path), "--max-new-tokens", "8", "--out", str(report_path)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = read(report_path)
    # a smoke model writing 8 tokens keeps no chain; the recorded replies kept one of two
    assert report["by_head"]["all"] == {"episodes": 2, "kept": 0, "recorded_kept": 1, "kept_only_here": 0,
                                        "kept_only_recorded": 1}
    assert [e["written"] for e in report["episodes"]] == [[], []]
    missing = subprocess.run([*script, "--trajectories", str(tmp_path / "none.jsonl"), "--out", str(report_path)],
                             capture_output=True, text=True, env=env, timeout=300)
    assert missing.returncode != 0 and missing.stderr.strip().endswith("none.jsonl does not exist")


@pytest.mark.gpu
def test_gpu_speed_of_a_30m_model():
    from transformers import AutoModelForCausalLM

    from drk_lab.rl.tiny_model import train_tokenizer
    from experiments.mini.model import build_model, generation_speed
    from experiments.mini.settings import ModelSettings

    tokenizer = train_tokenizer(1024)
    with tempfile.TemporaryDirectory() as folder:
        path = build_model(tokenizer, ModelSettings(), folder)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda()
    prompts = [[5 + (i % 50)] * 400 for i in range(256)]
    speed = generation_speed(model, prompts, 256, pad_token_id=tokenizer.pad_token_id, stop_token_ids=[-1])
    assert speed["tokens_per_s"] > 10_000, speed
