"""Reading a mini Dr. Kernel run back: what an evaluation shows (summarize_evaluation, which run.py writes
into eval_<checkpoint>.json), the run's results.json (results: its headline numbers, with a schema
version), and the tables notebook 06 draws from a run's folder (read_run, then headline_rows, paired_rows,
per_turn_rows, family_rows, outcome_rows, reading_rows, chain_step_rows, timing_rows), and
paired_rows_of_runs over every recorded run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path


# -- evaluation summary ----------------------------------------------------------------------------
def summarize_evaluation(trajectories, ps=(1.0, 1.2), specs: dict | None = None) -> dict:
    """What an evaluation shows: per turn Fast@p and correct rate (and best so far), over all
    evaluations the mean coverage of the correct kernels, reward-hack attempts caught per 100
    evaluations (replies with no code are not evaluations), the share of replies cut off by the token
    limit, and how many replies ended in each outcome (correct, or the harness's error kind). With the
    tasks' `specs` ({task name: TaskSpec}), also how many replies to tasks with a pointwise chain wrote
    that chain's operators in order (`chain_right` of `chain_replies`): whether the model read them off
    the prompt, which a wrong value alone does not say; and how many replies that follow one with the
    right chain still have it (`chain_kept` of `chain_to_keep`). turn_changes: what each reply after the
    first made of the one before it."""
    from collections import Counter

    from drk_lab.agent.metrics import fast_p_table, outcome

    per_task = {f"{t.task}#{t.sample}": [turn.result for turn in t.turns] for t in trajectories}
    table = fast_p_table(per_task, ps=ps)
    evaluated = [turn.result for t in trajectories for turn in t.turns if turn.code is not None]
    coverage = [r.coverage for r in evaluated if r.correct and not r.hacked and r.coverage is not None]
    hacked = sum(1 for r in evaluated if r.hacked)
    replies = sum(len(t.turns) for t in trajectories)
    cut_off = sum(turn.finish_reason == "length" for t in trajectories for turn in t.turns)
    last = table[-1] if table else {}
    outcomes = Counter(outcome(turn.result) for t in trajectories for turn in t.turns)
    return {
        "episodes": len(trajectories), "replies": replies, "evaluations": len(evaluated),
        "cut_off_rate": cut_off / replies if replies else 0.0,  # replies that hit max_new_tokens
        "per_turn": table,
        "correct_rate": last.get("best_correct", 0.0),
        "fast@1": last.get("best_fast@1", 0.0), "fast@1.2": last.get("best_fast@1.2", 0.0),
        "mean_coverage": sum(coverage) / len(coverage) if coverage else None,
        "hacks_caught": hacked,
        "hacks_per_100_evaluations": 100.0 * hacked / len(evaluated) if evaluated else 0.0,
        "reward_mean": sum(turn.reward for t in trajectories for turn in t.turns) / max(replies, 1),
        "outcomes": dict(outcomes.most_common()),
        **turn_changes(trajectories),
        **(chain_counts(trajectories, specs) if specs else {}),
        **({"by_family": family_counts(trajectories, specs)} if specs else {}),
    }


def turn_changes(trajectories) -> dict:
    """Over every pair of consecutive replies in an episode: after a correct one, how often the next is
    correct too (`correct_kept` of `correct_to_keep`; the next turn asks for a faster kernel, and a wrong
    one gives up what was there), and after a wrong one (no code, an error or a mismatch), how often the
    next is correct (`wrong_repaired` of `wrong_to_repair`). The per-turn rates mix the two; these say
    whether a change of the model moved its first replies or what it does with the feedback."""
    from drk_lab.agent.metrics import is_correct

    pairs = [(is_correct(a.result), is_correct(b.result)) for t in trajectories for a, b in zip(t.turns, t.turns[1:])]
    return {"correct_to_keep": sum(a for a, _ in pairs), "correct_kept": sum(a and b for a, b in pairs),
            "wrong_to_repair": sum(not a for a, _ in pairs), "wrong_repaired": sum(b and not a for a, b in pairs)}


def shared_first_tokens(trajectories) -> dict:
    """How alike the first replies to one task are, in tokens: of all first-reply tokens
    (`first_reply_tokens`), those in a prefix the reply shares with another reply to the same task
    (`first_reply_tokens_shared`, its longest such prefix), and those in the prefix all of the task's
    replies share (`first_reply_tokens_common`). A shared token has the same context in the replies
    that share it, so its pushes add up to the sum of their advantages: under TRLOO, whose advantages in
    a group sum to zero, the common ones cancel exactly, the other shared ones in part."""
    from collections import defaultdict
    from os.path import commonprefix  # works on any sequences, token lists included

    replies = defaultdict(list)
    for t in trajectories:
        if t.turns and t.turns[0].token_ids:
            replies[t.task].append(list(t.turns[0].token_ids))
    total = shared = everyone = 0
    for group in replies.values():
        total += sum(len(reply) for reply in group)
        shared += sum(max((len(commonprefix([reply, other])) for j, other in enumerate(group) if j != i), default=0)
                      for i, reply in enumerate(group))
        everyone += len(commonprefix(group)) * len(group) if len(group) > 1 else 0
    return {"first_reply_tokens": total, "first_reply_tokens_shared": shared, "first_reply_tokens_common": everyone}


def chain_counts(trajectories, specs: dict) -> dict:
    from drk_lab.data.kernels_rows import chain_wanted, chain_written

    if not any(t.task in specs for t in trajectories):
        return {}  # tasks without a spec (the built-in suite): nothing to count, rather than 0 of 0
    wanted = {name: chain_wanted(spec) for name, spec in specs.items()}
    right, kept = [], []
    for t in trajectories:
        if not wanted.get(t.task):
            continue
        chains = [chain_written(turn.code) if turn.code is not None else None for turn in t.turns]
        right += [chain == wanted[t.task] for chain in chains if chain is not None]
        # a later reply after one with the right chain: did it keep the chain (the model's own kernel is
        # in its context) or write the operators anew?
        kept += [later == wanted[t.task] for earlier, later in zip(chains, chains[1:]) if earlier == wanted[t.task]]
    return {"chain_replies": len(right), "chain_right": sum(right), "chain_to_keep": len(kept), "chain_kept": sum(kept)}


def task_family(spec) -> str:
    """A task's kind: its level and the linear or conv it starts with ("L2 conv"), or for a level-1 task
    without one its single operator ("L1 mean"). The held-out split keeps whole kinds of level-1 task out
    of training (the RL prompt set made here: a lone linear, mean, amax, LayerNorm or softplus), which a
    model must then write without ever having seen one; the totals over all kinds hide that."""
    return f"L{spec.level} {spec.head or spec.steps[0].split(':')[0]}"


def family_counts(trajectories, specs: dict) -> dict:
    """Per task_family (tasks without a spec left out): episodes, those solved (correct in some turn) and
    those with a correct kernel faster than eager PyTorch in some turn (`fast@1`)."""
    from drk_lab.agent.metrics import is_correct, is_fast

    counts: dict[str, dict] = {}
    for t in trajectories:
        if t.task not in specs:
            continue
        row = counts.setdefault(task_family(specs[t.task]), {"episodes": 0, "solved": 0, "fast@1": 0})
        results = [turn.result for turn in t.turns]
        row["episodes"] += 1
        row["solved"] += any(is_correct(r) for r in results)
        row["fast@1"] += any(is_fast(r, 1.0) for r in results)
    return dict(sorted(counts.items(), key=lambda item: -item[1]["episodes"]))


def caught_hacks(trajectories) -> list[dict]:
    """The replies the harness caught cheating, one row each: task, sample, turn, the checks that fired
    (`reasons`), the harness's message and the code, to read what the policy tried (a count alone cannot
    tell a deliberate shortcut from a reply cut short before its kernel launch)."""
    from drk_lab.agent.rewards import is_hacked

    return [{"task": t.task, "sample": t.sample, "turn": turn.index, "reasons": list(turn.result.hack_reasons),
             "error": turn.result.error, "code": turn.code}
            for t in trajectories for turn in t.turns if turn.result is not None and is_hacked(turn.result)]


def paired_comparison(base, trajectories) -> dict:
    """The same tasks and samples evaluated after two checkpoints (`base`, usually after SFT, and
    `trajectories`) with the same sampling seed: how many episodes are solved (correct in some turn) by
    both, only the base, only the other, or neither, and how many first and second replies are token for
    token the base's. With a shared seed a checkpoint that barely moved repeats the base's replies, so
    the counts separate what a change of the model did from what another draw of samples would do.
    `tasks_better_after` / `tasks_better_before`: tasks whose episodes were solved more often after /
    before, for a sign test over tasks (one task's samples share its near-even choices, so they tend to
    flip together and a test over episodes overstates the evidence). `kept_only_after` /
    `kept_only_before`: of the episodes whose first reply was correct after both checkpoints (mostly the
    same reply), those whose second reply stayed correct after only one of them: what the second turn,
    which the reward pays for staying correct and getting faster, made of the same start."""
    from drk_lab.agent.metrics import is_correct

    def key(t):
        return f"{t.task}#{t.sample}"

    before = {key(t): t for t in base}
    pairs = [(before[key(t)], t) for t in trajectories if key(t) in before]

    def solved(t) -> bool:
        return any(is_correct(turn.result) for turn in t.turns)

    def same_reply(a, b, turn: int) -> bool:
        return len(a.turns) > turn and len(b.turns) > turn and a.turns[turn].token_ids == b.turns[turn].token_ids

    def correct_at(t, turn: int) -> bool:
        return len(t.turns) > turn and is_correct(t.turns[turn].result)

    change: dict[str, int] = {}
    for a, b in pairs:
        change[b.task] = change.get(b.task, 0) + solved(b) - solved(a)
    started_right = [(a, b) for a, b in pairs if correct_at(a, 0) and correct_at(b, 0)]
    return {"episodes": len(pairs),
            "solved_by_both": sum(solved(a) and solved(b) for a, b in pairs),
            "solved_only_before": sum(solved(a) and not solved(b) for a, b in pairs),
            "solved_only_after": sum(solved(b) and not solved(a) for a, b in pairs),
            "solved_by_neither": sum(not solved(a) and not solved(b) for a, b in pairs),
            "same_first_reply": sum(same_reply(a, b, 0) for a, b in pairs),
            "same_second_reply": sum(same_reply(a, b, 1) for a, b in pairs),
            "tasks_better_after": sum(c > 0 for c in change.values()),
            "tasks_better_before": sum(c < 0 for c in change.values()),
            "kept_only_after": sum(correct_at(b, 1) and not correct_at(a, 1) for a, b in started_right),
            "kept_only_before": sum(correct_at(a, 1) and not correct_at(b, 1) for a, b in started_right)}


# -- reading a run back (notebooks/06_mini_drkernel) -------------------------------------------------
HEADLINE = ("correct_rate", "fast@1", "fast@1.2", "mean_coverage", "hacks_per_100_evaluations", "correct_kept",
            "correct_to_keep", "wrong_repaired", "wrong_to_repair", "chain_right", "chain_replies", "chain_kept",
            "chain_to_keep", "evaluations", "cut_off_rate")


def read_run(run_dir: str | Path) -> dict:
    """What run.py left in `run_dir` (or its --export copy): {"phases": {name: JSON}, "evals": {checkpoint:
    JSON}, "rl_logs": {tag: run-log rows}}; settings.json is a phase of its own, results.json is not."""
    from drk_lab.rl.runlog import read_log

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder (experiments/mini/run.py --out or --export)")
    phases = {p.stem: json.loads(p.read_text()) for p in sorted(run_dir.glob("*.json"))
              if not p.stem.startswith("eval_") and p.name != RESULTS}
    evals = {p.stem[len("eval_"):]: json.loads(p.read_text()) for p in sorted(run_dir.glob("eval_*.json"))}
    logs = {p.name[len("rl_"):]: read_log(p / "log") for p in sorted(run_dir.glob("rl_*"))
            if (p / "log" / "metrics.jsonl").exists()}
    return {"phases": phases, "evals": evals, "rl_logs": logs}


# -- results.json: what a run shows, in one file ------------------------------------------------------
RESULTS = "results.json"
SCHEMA_VERSION = 1  # bump when a key of results() changes meaning
RESULT_KEYS = ("episodes", "solved", "correct_rate", "fast@1", "fast@1.2", "correct_kept", "correct_to_keep",
               "chain_right", "chain_replies", "hacks_caught")
PAIRED_KEYS = ("solved_only_after", "solved_only_before", "tasks_better_after", "tasks_better_before")


def results(run_dir: str | Path) -> dict:
    """The run's headline numbers: per evaluated checkpoint and part (held-out, seen, built-in, STTS) the
    episodes solved in some turn, Fast@p and the second turn's keeps; per RL checkpoint its pairing with
    the model after SFT (with the sign test over episodes); per RL arm its steps and step seconds. Date,
    commit and machine come from settings.json, or stay as an earlier results.json had them."""
    run_dir = Path(run_dir)
    run = read_run(run_dir)
    settings = run["phases"].get("settings", {})
    known = json.loads((run_dir / RESULTS).read_text()) if (run_dir / RESULTS).exists() else {}
    out = {"schema_version": SCHEMA_VERSION,
           **{key: settings.get(key, known.get(key)) for key in ("date", "commit", "machine")}, "evaluations": {}}
    for name in checkpoint_order(run["evals"]):
        for part, summary in run["evals"][name].items():
            if not isinstance(summary, dict) or "correct_rate" not in summary:
                continue
            row = {k: summary.get(k) for k in RESULT_KEYS if k in summary or k == "solved"}
            row["solved"] = round(summary["correct_rate"] * summary["episodes"])
            paired = summary.get("paired_with_sft")
            if paired:
                row["paired_with_sft"] = {k: paired[k] for k in PAIRED_KEYS if k in paired}
                row["paired_with_sft"]["sign_test_p"] = sign_test_p(paired["solved_only_after"],
                                                                    paired["solved_only_before"])
            out["evaluations"].setdefault(name, {})[part] = row
    out["rl"] = {name[len("rl_"):]: {k: report.get(k) for k in ("steps_done", "rl_seconds")}
                 for name, report in run["phases"].items() if name.startswith("rl_") and "steps_done" in report}
    return out


def write_results(run_dir: str | Path) -> Path:
    path = Path(run_dir) / RESULTS
    path.write_text(json.dumps(results(run_dir), indent=1) + "\n")
    return path


def settings_row(run: dict) -> dict:
    """The run's settings as one row: "part.name" for the grouped settings of run.py, the names as they
    were for runs recorded before the groups."""
    row = {}
    for key, value in run["phases"].get("settings", {}).get("settings", {}).items():
        row.update({f"{key}.{k}": v for k, v in value.items()} if isinstance(value, dict) else {key: value})
    return row


def headline_rows(run: dict, part: str = "heldout", baseline: str = "sft") -> list[dict]:
    """One row per evaluated checkpoint, `baseline` (after SFT) first, then each RL run: correct rate,
    Fast@1, Fast@1.2 (best over turns), mean coverage, hack attempts caught per 100 evaluations."""
    return [{"checkpoint": name, **{k: run["evals"][name][part].get(k) for k in HEADLINE}}
            for name in checkpoint_order(run["evals"], baseline) if part in run["evals"][name]]


def sign_test_p(only_after: int, only_before: int) -> float:
    """Two-sided exact sign test on the episodes solved by only one of two checkpoints: the chance of a
    split at least this uneven if either checkpoint were as likely to be the one that solved each (the
    episodes solved by both or neither say nothing about which is better). Episodes are taken as
    independent; the samples of one task are not, so p over episodes comes out small, and the same test
    over tasks (`tasks_better_after` / `tasks_better_before`) is the safer one."""
    n, k = only_after + only_before, max(only_after, only_before)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n) if n else 1.0


def paired_rows(run: dict, part: str = "heldout", against_rl: bool = False) -> list[dict]:
    """Each RL checkpoint against the one after SFT, episode by episode on `part` (paired_comparison),
    with the sign test's p over episodes and, where the task counts were recorded, over tasks;
    evaluations made before these counts have none. With `against_rl`, each RL checkpoint against the
    RL checkpoints evaluated before it instead (an ablation or control against TRLOO; "after" is the
    checkpoint, "before" the one in `against`), recorded from 2026-12-04 on."""
    rows = []
    for name, report in sorted(run["evals"].items()):
        summary = report.get(part, {})
        pairs = summary.get("paired_with_rl", {}) if against_rl else {"sft": summary.get("paired_with_sft")}
        rows += [{"checkpoint": name, "against": other, **counts} for other, counts in pairs.items() if counts]
    for row in rows:
        row["sign_test_p"] = sign_test_p(row["solved_only_after"], row["solved_only_before"])
        if "tasks_better_after" in row:  # recorded from 2026-12-04 on
            row["task_sign_test_p"] = sign_test_p(row["tasks_better_after"], row["tasks_better_before"])
        if "kept_only_after" in row:  # recorded from 2026-12-04 on
            row["kept_sign_test_p"] = sign_test_p(row["kept_only_after"], row["kept_only_before"])
    return rows


# how run.py names an evaluation at another temperature than the default
TEMPERATURE_SUFFIX = re.compile(r"_temp[0-9.]+$")


def checkpoint_order(names, baseline: str = "sft") -> list[str]:
    """Evaluation names for tables and plots: `baseline` first, then the RL checkpoints; those sampled at
    another temperature after them, in the same order, so that each sits beside its own baseline."""
    def key(name):
        temperature = TEMPERATURE_SUFFIX.search(name)
        checkpoint = name[:temperature.start()] if temperature else name
        return (temperature.group() if temperature else "", checkpoint != baseline, checkpoint)
    return sorted(names, key=key)


def at_another_temperature(name: str) -> bool:
    """Whether an evaluation's name is `<checkpoint>_temp<T>`: that checkpoint sampled at another temperature
    than the evaluation's default (run.py names them so)."""
    return TEMPERATURE_SUFFIX.search(name) is not None


def paired_rows_of_runs(runs_dir: str | Path, part: str = "heldout", pattern: str = "*",
                        leave_out: tuple[str, ...] = ("rl_shuffled",)) -> list[dict]:
    """paired_rows of every run folder in `runs_dir` matching `pattern` that has them (checkpoint named
    run/checkpoint), then a row "all" with their sums and its sign test: whether RL's effect on `part`
    keeps its sign from one run to the next. The checkpoints of one run share their SFT model and tasks,
    so the pooled p is optimistic; a run's own rows say how much each contributes. Checkpoints whose
    names start with one of `leave_out` are not RL's effect (the shuffled-advantage controls, any seed)
    and are left out, and so is an arm's earlier point (`rl_<tag>_step<N>`: `rl.snapshot_step`, or a
    carried arm's end on an earlier machine) where the arm's end is evaluated too, which would count its
    episodes twice; an arm whose later end was never evaluated counts with its earlier point. Evaluations
    at another sampling temperature (`<checkpoint>_temp<T>`) are the same checkpoints again and are left out."""
    def counted(row, names):
        name = row["checkpoint"]
        return (not name.startswith(leave_out) and not at_another_temperature(name)
                and re.sub(r"_step\d+$", "", name) not in names - {name})

    rows = []
    for folder in sorted(Path(runs_dir).glob(pattern)):
        if folder.is_dir():
            own = paired_rows(read_run(folder), part)
            names = {row["checkpoint"] for row in own}
            rows += [{**row, "checkpoint": f"{folder.name}/{row['checkpoint']}"} for row in own if counted(row, names)]
    if not rows:
        return rows
    summed = ("episodes", "solved_by_both", "solved_only_before", "solved_only_after", "solved_by_neither")
    total = {"checkpoint": "all", **{key: sum(row[key] for row in rows) for key in summed}}
    return rows + [{**total, "sign_test_p": sign_test_p(total["solved_only_after"], total["solved_only_before"])}]


def per_turn_rows(run: dict, parts=("heldout", "heldout_stts", "seen", "builtin")) -> list[dict]:
    """Fast@1, Fast@1.2 and correct rate per turn (that turn alone, and best so far) for every checkpoint
    and part: the plain episodes and STTS."""
    rows = []
    for name, report in run["evals"].items():
        for part in parts:
            for turn in report.get(part, {}).get("per_turn", []):
                rows.append({"checkpoint": name, "part": part, **turn})
    return rows


def timing_rows(run: dict) -> list[dict]:
    """Seconds per phase as the run measured them; an RL phase also gets a "steps" row, its steps' seconds
    over every call that trained them (in runs up to 2026-12-03, a resumed phase's own seconds
    are only its last call's). An evaluation's batches split into generating and evaluating (runs
    recorded before that split have none)."""
    rows = []
    for name, report in run["phases"].items():
        if isinstance(report, dict) and "seconds" in report:
            rows.append({"phase": name, "seconds": report["seconds"]})
            if "rl_seconds" in report:  # the RL steps alone, across the calls that trained them
                rows.append({"phase": f"{name}: steps", "seconds": report["rl_seconds"]})
    for name, report in run["evals"].items():
        rows.append({"phase": f"eval {name}", "seconds": report.get("seconds")})
        rows += [{"phase": f"eval {name}: {batch}, {part}", "seconds": seconds}
                 for batch, split in report.get("seconds_split", {}).items() for part, seconds in split.items()]
    return rows


def reading_rows(run: dict) -> list[dict]:
    """reads_the_task after pretraining, SFT and each RL run, one row per phase and part (held-out, seen)."""
    order = sorted(run["phases"], key=lambda name: (name != "pretrain", name != "sft", name))
    return [{"phase": phase, "part": part, **scores} for phase in order
            for part, scores in run["phases"][phase].get("reads_the_task", {}).items()]


def chain_step_rows(run: dict) -> list[dict]:
    """Per RL run and step, the rollouts' operator counts (chain_right of chain_replies, chain_kept of
    chain_to_keep) and, from 2026-12-04 on, the first replies' tokens shared within a group
    (shared_first_tokens); runs recorded before these counts have none."""
    return [{"run": name[len("rl_"):], **counts} for name, report in sorted(run["phases"].items())
            if name.startswith("rl_") for counts in report.get("chain_per_step", [])]


PROBE_PAIRED = ("solved_only_after", "solved_only_before", "kept_only_after", "kept_only_before", "same_first_reply")


def probe_rows(run: dict) -> list[dict]:
    """Per RL run and held-out probe (`rl.probe_every`): the probe's step, headline numbers and, against
    the arm's first probe, the episodes solved only after / only before and the second turns kept from
    the same correct start, with their sign tests; runs recorded without probes have none."""
    rows = []
    for name, report in sorted(run["phases"].items()):
        for probe in report.get("probes", []) if name.startswith("rl_") else []:
            row = {"run": name[len("rl_"):], "step": probe["step"], **{k: probe.get(k) for k in HEADLINE}}
            paired = probe.get("paired_with_first")
            if paired:
                row.update({"first_step": paired["step"], **{k: paired[k] for k in PROBE_PAIRED},
                            "sign_test_p": sign_test_p(paired["solved_only_after"], paired["solved_only_before"]),
                            "kept_sign_test_p": sign_test_p(paired["kept_only_after"], paired["kept_only_before"])})
            rows.append(row)
    return rows


def family_rows(run: dict, part: str = "heldout") -> list[dict]:
    """Per evaluated checkpoint (after SFT first) and task_family on `part`: episodes, solved and fast@1
    (evaluations recorded before these counts have none)."""
    return [{"checkpoint": name, "family": family, **counts}
            for name in checkpoint_order(run["evals"])
            for family, counts in run["evals"][name].get(part, {}).get("by_family", {}).items()]


def outcome_rows(run: dict, part: str = "heldout") -> list[dict]:
    """How the replies of each evaluated checkpoint (after SFT first) ended on `part`: correct, or the
    harness's error kind."""
    return [{"checkpoint": name, **run["evals"][name][part]["outcomes"]}
            for name in checkpoint_order(run["evals"])
            if "outcomes" in run["evals"][name].get(part, {})]
