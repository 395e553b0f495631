"""Cold-start SFT data: Dr. Kernel's layout read, checked and written, this project's trajectories turned
into it, and a small demonstration set built here (rl/sft.py trains on it).

Layout (Dr. Kernel's cold-start set, hkust-nlp/drkernel-coldstart-8k): one row per trajectory, a
`messages` column (a list of {role, content}: user, assistant, user, assistant, ...; an optional system
message first; the last message is the assistant's) and metadata columns (uuid, entry_point,
final_speedup, best_round, ...), which are kept as they are.

    rows = trajectories_to_cold_start(read_jsonl("runs.jsonl"))     # this project's own episodes
    write_cold_start(rows, "data/sft/ours.parquet")
    data = load_cold_start(["data/sft/drkernel.parquet", "data/sft/ours.parquet"], min_speedup=1.0)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ROLES = ("system", "user", "assistant")
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class ColdStartError(ValueError):
    """A cold-start file or row that cannot be used for SFT."""


# -- reading and writing -------------------------------------------------------------------------
def data_files(path_or_paths) -> list[Path]:
    paths = [path_or_paths] if isinstance(path_or_paths, (str, os.PathLike)) else list(path_or_paths)
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in DATA_SUFFIXES)
            if not found:
                raise ColdStartError(f"{p}: no {', '.join(DATA_SUFFIXES)} files in this folder")
            files.extend(found)
        elif not p.is_file():
            raise ColdStartError(f"{p}: no such file or folder")
        elif p.suffix not in DATA_SUFFIXES:
            raise ColdStartError(f"{p}: unknown format {p.suffix!r}; expected one of {', '.join(DATA_SUFFIXES)}")
        else:
            files.append(p)
    if not files:
        raise ColdStartError("no cold-start files given")
    return files


def read_rows_json(path: Path) -> tuple[list[dict], list[str]]:
    """The rows of a JSONL file (or a .json file holding one array of rows) and where each came from."""
    if path.suffix == ".json" and path.read_text().lstrip().startswith("["):
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ColdStartError(f"{path}: not JSON ({e})") from None
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ColdStartError(f"{path}: row {index}: a row must be a JSON object, got {type(row).__name__}")
        return rows, [f"row {i}" for i in range(len(rows))]
    rows, lines = [], []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ColdStartError(f"{path}: line {line_no}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise ColdStartError(f"{path}: line {line_no}: a row must be a JSON object, got {type(row).__name__}")
            rows.append(row)
            lines.append(f"line {line_no}")
    return rows, lines


def _read_checked_table(path: Path):
    """A file's rows as a pyarrow table, each row's messages checked (an error names "line N" for JSONL,
    from 1, or "row N" for parquet and JSON arrays, from 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        table = pq.read_table(path)
        if "messages" not in table.column_names:
            raise ColdStartError(f"{path}: no 'messages' column (columns: {', '.join(table.column_names)})")
        for index, messages in enumerate(table.column("messages").to_pylist()):
            check_messages(messages, f"{path}: row {index}")
        return table
    rows, places = read_rows_json(path)
    if not rows:
        raise ColdStartError(f"{path}: no rows")
    for row, place in zip(rows, places):
        if "messages" not in row:
            raise ColdStartError(f"{path}: {place}: no 'messages' (keys: {', '.join(row)})")
        check_messages(row["messages"], f"{path}: {place}")
    try:
        return pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ColdStartError(f"{path}: rows do not share one schema ({e})") from None


def check_messages(messages, where: str = "row") -> None:
    """Raise ColdStartError (naming `where`) unless `messages` is a trainable conversation."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ColdStartError(f"{where}: 'messages' must be a non-empty list of {{role, content}}, got {messages!r:.80}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise ColdStartError(f"{where}: message {i} must be a dict with 'role' and 'content', got {m!r:.80}")
        if m.get("content") is None:  # a missing key reads as None once rows share an Arrow schema
            raise ColdStartError(f"{where}: message {i} ({m.get('role')}) has no content")
        if m.get("role") not in ROLES:
            raise ColdStartError(f"{where}: message {i} has role {m.get('role')!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(m["content"], str):
            raise ColdStartError(f"{where}: message {i} ({m['role']}) has content of type "
                                 f"{type(m['content']).__name__}, not str")
        if m["role"] == "system" and i != 0:
            raise ColdStartError(f"{where}: message {i} is a system message; only the first message may be one")
    if messages[-1]["role"] != "assistant":
        raise ColdStartError(f"{where}: the last message is a {messages[-1]['role']} message; "
                             "a trajectory must end with an assistant turn")


def load_cold_start(path_or_paths, min_speedup: float | None = None, max_rows: int | None = None):
    """A datasets.Dataset of cold-start rows from JSONL (.jsonl, or .json: one object a line or one array of
    them) or parquet files, or folders of them (all such files below, in name order), concatenated in
    the order given.

    Every row's `messages` is checked (check_messages); the error names the file and row (1-based
    line for JSONL, 0-based row index otherwise). Other columns are kept. min_speedup keeps rows
    whose final_speedup is at least that (rows without one are dropped); max_rows keeps the first rows.
    """
    import pyarrow as pa
    from datasets import Dataset
    from datasets.table import InMemoryTable

    tables = [_read_checked_table(path) for path in data_files(path_or_paths)]
    try:
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ColdStartError(f"the files' columns do not match ({e})") from None
    data = Dataset(InMemoryTable(table))
    if min_speedup is not None:
        if "final_speedup" not in data.column_names:
            raise ColdStartError("min_speedup needs a 'final_speedup' column")
        data = data.filter(lambda s: s is not None and s >= min_speedup, input_columns="final_speedup")
    if max_rows is not None:
        data = data.select(range(min(max_rows, len(data))))
    return data


def write_cold_start(rows: list[dict], path: str | os.PathLike) -> Path:
    """Write cold-start rows to JSONL (.jsonl/.json) or parquet (.parquet), by suffix; returns the path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.suffix not in DATA_SUFFIXES:
        raise ColdStartError(f"{path}: unknown format {path.suffix!r}; expected one of {', '.join(DATA_SUFFIXES)}")
    for index, row in enumerate(rows):
        check_messages(row.get("messages"), f"row {index}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        with path.open("w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return path


# -- this project's trajectories -----------------------------------------------------------------
def _speedup(result) -> float | None:
    if not result.ok:
        return 0.0
    return float(result.speedup) if result.speedup is not None else None


def trajectory_messages(traj, upto: int | None = None) -> list[dict]:
    """The whole conversation of a Trajectory: [system], the first prompt, then each turn's reply and
    (except after the last turn kept) its feedback. upto: keep turns 0..upto only. Every turn sees
    all earlier turns here, even where the episode's own context held fewer (rolling window, STTS)."""
    turns = traj.turns if upto is None else traj.turns[: upto + 1]
    messages = [{"role": "system", "content": traj.system_prompt}] if traj.system_prompt else []
    messages.append({"role": "user", "content": traj.prompt})
    for i, turn in enumerate(turns):
        messages.append({"role": "assistant", "content": turn.response})
        if i < len(turns) - 1:
            messages.append({"role": "user", "content": turn.feedback})
    return messages


def trajectories_to_cold_start(trajs, start_uuid: int = 0, end_at_best: bool = False) -> list[dict]:
    """Cold-start rows (Dr. Kernel's layout) from drk_lab.agent.episodes.Trajectory records.

    Columns: messages (trajectory_messages), uuid (start_uuid, start_uuid + 1, ...), entry_point
    ("Model", the reference class, as in Dr. Kernel's set), task (the task's name), final_speedup
    (speedup of the last kept turn: 0.0 when that turn failed, was wrong or hacked, None when correct
    but untimed), best_speedup (the highest such speedup over the kept turns), best_round (1-based
    index of the highest-reward turn, Trajectory.best), num_rounds, sample, reward_fn, rewards.
    end_at_best: end each conversation at its best turn (the turns after it are dropped).
    Trajectories without turns are skipped.
    """
    rows = []
    for traj in trajs:
        if not traj.turns:
            continue
        best = traj.best.index
        kept = traj.turns[: best + 1] if end_at_best else traj.turns
        speedups = [s for s in (_speedup(t.result) for t in kept) if s is not None]
        rows.append({
            "messages": trajectory_messages(traj, upto=best if end_at_best else None),
            "uuid": start_uuid + len(rows),
            "entry_point": "Model",
            "task": traj.task,
            "final_speedup": _speedup(kept[-1].result),
            "best_speedup": max(speedups) if speedups else None,
            "best_round": best + 1,
            "num_rounds": len(kept),
            "sample": traj.sample,
            "reward_fn": traj.reward_fn,
            "rewards": [float(t.reward) for t in kept],
        })
    return rows


def demonstrations(tasks, plain_dir=None, device: str | None = None, **eval_kwargs) -> list:
    """Two-turn demonstration trajectories, built and evaluated here: turn 1 a plain, slow kernel
    (data/plain), turn 2 the project's solution with the first turn's feedback before it. Tasks
    without both are skipped. A small cold-start set that runs anywhere; tasks may be resized."""
    from drk_lab.agent.episodes import run_episode
    from drk_lab.harness.task import DATA_DIR, TaskError, builtin_solution
    from drk_lab.policies.scripted import ScriptedPolicy

    plain_dir = Path(plain_dir or DATA_DIR / "plain")
    trajectories = []
    for task in tasks:
        plain = plain_dir / f"level{task.level}" / f"{task.name}.py"
        try:
            solution = builtin_solution(task)
        except TaskError:
            continue
        if not plain.is_file():
            continue
        answers = [f"```python\n{code}```" for code in (plain.read_text(), solution)]
        trajectories.append(run_episode(task, ScriptedPolicy(answers=answers), max_turns=2, device=device,
                                        **eval_kwargs))
    return trajectories


def cold_start_data(data: str, tasks=(), device: str | None = None):
    """A notebook's data parameter as a Dataset: "demonstrations" builds the two-turn demonstrations of
    `tasks` here; anything else is a cold-start file or folder (relative paths from the repository)."""
    from datasets import Dataset

    from drk_lab.harness.task import in_repo

    if data == "demonstrations":
        return Dataset.from_list(trajectories_to_cold_start(demonstrations(tasks, device=device)))
    return load_cold_start(in_repo(data))
