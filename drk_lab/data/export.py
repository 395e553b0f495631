"""Rows on disk: JSONL (optionally gzipped) and parquet, chosen by the file's suffix; the RL prompt rows.

    rows = rl_rows(generated, heldout_fraction=0.2, seed=0)
    write_rows(rows, "data/rl/prompts.parquet"); write_rows(rows, "data/rl/prompts.jsonl.gz")
    specs_and_tasks = read_rl_tasks("data/rl/prompts.parquet", split="train")

An RL row: name, level, prompt (the first user message KernelEnv sends at full size), code (the
reference, KernelBench format, so drk_lab.harness.task.task_from_row loads it), entry_point ("Model"),
ops (the operator list), combination, split ("train" or "heldout"), dtype, key (the dedupe key) and
spec (the TaskSpec as JSON, from which the teacher writes its solutions).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from drk_lab.agent.prompts import initial_prompt
from drk_lab.data.splits import split_of
from drk_lab.data.spec import TaskSpec
from drk_lab.harness.task import Task, task_from_row

SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")


class DataFileError(ValueError):
    """A data file that cannot be read or written (its message names the file)."""


def _kind(path: Path) -> str:
    for suffix in SUFFIXES:
        if path.name.endswith(suffix):
            return suffix
    raise DataFileError(f"{path}: unknown format; expected one of {', '.join(SUFFIXES)}")


def write_rows(rows: list[dict], path) -> Path:
    path = Path(path)
    kind = _kind(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path, compression="zstd")
    else:
        opener = gzip.open if kind == ".jsonl.gz" else open
        with opener(path, "wt") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return path


def read_rows(path) -> list[dict]:
    path = Path(path)
    kind = _kind(path)
    if not path.is_file():
        raise DataFileError(f"{path}: no such file")
    if kind == ".parquet":
        import pyarrow.parquet as pq

        try:
            return pq.read_table(path).to_pylist()
        except Exception as e:  # pyarrow raises several kinds for a file that is not parquet
            raise DataFileError(f"{path}: not a parquet file ({type(e).__name__})") from None
    opener = gzip.open if kind == ".jsonl.gz" else open
    rows = []
    try:
        with opener(path, "rt") as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    rows.append(json.loads(line))
    except (json.JSONDecodeError, OSError, UnicodeDecodeError) as e:
        raise DataFileError(f"{path}: line {len(rows) + 1}: not JSON ({type(e).__name__})") from None
    return rows


def rl_row(spec: TaskSpec, task: Task, split: str) -> dict:
    return {"name": spec.name, "level": spec.level, "prompt": initial_prompt(task), "code": task.source,
            "entry_point": "Model", "ops": spec.ops, "combination": spec.combination, "split": split,
            "dtype": spec.dtype, "key": spec.key, "spec": json.dumps(spec.to_dict())}


def rl_rows(generated, heldout_fraction: float = 0.2, seed: int = 0) -> list[dict]:
    """RL prompt rows of GeneratedTasks, each with its split (splits.py)."""
    return [rl_row(g.spec, g.task, split_of(g.spec.combination, heldout_fraction, seed)) for g in generated]


def read_rl_tasks(path, split: str | None = None, check: bool = False) -> list[tuple[TaskSpec, Task, dict]]:
    """(spec, task, row) for each RL row of a file (of `split` only, if given). check=True runs each
    reference on the meta device as it loads (task_from_row)."""
    out = []
    for index, row in enumerate(read_rows(path)):
        missing = [c for c in ("name", "code", "spec", "split") if c not in row]
        if missing:
            raise DataFileError(f"{path}: row {index}: no {', '.join(missing)} column (an RL prompt file "
                                "from `drk data rl` has them)")
        if split is not None and row["split"] != split:
            continue
        out.append((TaskSpec.from_dict(json.loads(row["spec"])), task_from_row(row, check=check), row))
    return out
