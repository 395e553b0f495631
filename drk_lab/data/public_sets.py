"""Public kernel data sets on the user's disk -> drk_lab Tasks and cold-start (SFT) rows.

    from drk_lab.data.public_sets import drkernel_rl_tasks, drkernel_cold_start, kernelbook_pairs
    rl = drkernel_rl_tasks("drkernel-rl-data.parquet", limit=500)      # a PublicSet
    print(rl.summary()); tasks = rl.tasks
    book = kernelbook_pairs("dataset_permissive.parquet")               # tasks and SFT rows
    write_cold_start(book.sft_rows, "data/sft/kernelbook.parquet")      # drk_lab.rl.sft

Nothing is downloaded: each function reads a file (.jsonl, .json holding one object a line or one array,
.parquet; parquet needs pyarrow, part of the `rl` extra) or a folder of them. The layouts, as published:

Dr. Kernel RL prompts (hkust-nlp/drkernel-rl-data, one parquet of about 72k rows; its validation set
hkust-nlp/drkernel-validation-data, 100 KernelBench level-2 tasks, has the same columns):
    data_source   text: where the problem comes from ("cuda_llm", "kernelbench_level2_validation")
    prompt        list of {role, content}: the one user turn that opens an episode
    ability       text: "kernel_optimization"
    reward_model  {ground_truth, style}: ground_truth is the PyTorch reference source
    extra_info    {entry_point, level, module_name, ops, original_prompt, repo_name, type, uuid}
                  (validation set: {difficulty, name, problem_id})
  drkernel_rl_tasks: a Task per row from ground_truth, its class extra_info.entry_point (default Model);
  name extra_info.name, else "<uuid>_<entry point>"; level extra_info.level, else the "levelN" in
  data_source. No SFT rows: the set holds no answers. Dr. Kernel's own prompt text is not kept (drk_lab
  prompts with agent.prompts.initial_prompt).

Dr. Kernel cold start (hkust-nlp/drkernel-coldstart-8k): one row per multi-turn trajectory
    messages      list of {role, content}: the task (user), an answer (assistant), feedback (user), ...
    uuid, entry_point, final_speedup, best_round, ...: metadata; some copies add original_python_code
  drkernel_cold_start: every row is an SFT row as it is (messages checked with data.cold_start.check_messages) plus
  a `task` column, the name of the Task recovered from original_python_code when present, else from the
  reference block of the first user message (reference_in_message), or None when none can be recovered.

KernelBook (GPUMODE/KernelBook, dataset_permissive.{json,parquet}): PyTorch modules from GitHub and the
Triton code torch.compile (inductor, PyTorch 2.5) made of each
    python_code   the module, get_inputs() and get_init_inputs() returning [args, kwargs]
    triton_code   inductor's @triton.jit kernels, a call(args) function and class <entry_point>New
    entry_point   the module's class name
    uuid, repo_name, module_name, synthetic, licenses, stars, sha, repo_link: metadata
  kernelbook_pairs: a Task from python_code (kernelbench_format) and an SFT row: the project's first prompt
  for that Task (user) and triton_code with <entry_point>New renamed ModelNew as one ```python block
  (assistant; exactly what agent.extraction finds), with the metadata columns (not the two code columns).
  Inductor's code targets CUDA (and PyTorch 2.5): the answers are training text, not evaluated here.

KernelBench checkout: kernelbench_tasks (harness.task.load_tasks, broken files counted instead of raised).

A row whose code cannot become a KernelBench-format Task, or fails check_source, is skipped and counted
by reason (PublicSet.skipped, with the row and detail in skipped_rows); a reference seen in an earlier row
gives no second Task (PublicSet.repeats). A missing file or column, or a malformed row (a wrong type in a
column), raises PublicSetError in one line naming the file, the row and the column. With check=True (the
default) each reference is executed once on the meta device, as drk_lab runs every task: load sets you trust.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from drk_lab.agent.extraction import extract_code
from drk_lab.agent.prompts import initial_prompt
from drk_lab.data.cold_start import ColdStartError, check_messages, data_files, read_rows_json
from drk_lab.data.kernelbench_format import NotKernelBench, kernelbench_source, reference_in_message, renamed_class
from drk_lab.harness.task import Task, TaskError, load_tasks, task_from_source

KERNELBOOK_CODE = ("python_code", "triton_code")


class PublicSetError(ValueError):
    """A file, column or row that does not have its data set's layout."""


@dataclass
class PublicSet:
    """What a loader made of a file: the Tasks, the SFT rows, and what it skipped and why."""

    source: str
    tasks: list[Task] = field(default_factory=list)
    sft_rows: list[dict] = field(default_factory=list)
    read: int = 0  # rows read (files for kernelbench_tasks)
    skipped: Counter = field(default_factory=Counter)  # reason -> rows
    skipped_rows: list[str] = field(default_factory=list)  # "<row>: <reason>: <detail>", one per skipped row
    repeats: int = 0  # rows whose reference an earlier row already gave

    def skip(self, where: str, reason: str, detail: str = "") -> None:
        self.skipped[reason] += 1
        self.skipped_rows.append(f"{where}: {reason}" + (f": {detail}" if detail else ""))

    def summary(self) -> str:
        text = f"{self.source}: {self.read} rows read, {len(self.tasks)} tasks, {len(self.sft_rows)} SFT rows"
        if self.repeats:
            text += f", {self.repeats} repeated references"
        if self.skipped:
            reasons = "; ".join(f"{n} {reason}" for reason, n in self.skipped.most_common())
            text += f"; skipped {sum(self.skipped.values())} ({reasons})"
        return text


# -- reading -------------------------------------------------------------------------------------
def read_rows(path, columns: tuple[str, ...] = (), limit: int | None = None,
              only: tuple[str, ...] | None = None) -> list[tuple[str, dict]]:
    """(where, row) for each row of a file or of the data files in a folder, the first `limit` rows if
    given; `where` names the file and row ("f.jsonl: line 3", 1-based; "f.parquet: row 2", 0-based).
    PublicSetError when a file is missing, unreadable, empty, or lacks one of `columns` (the message lists
    the columns it has). `only`: read just these parquet columns (where present), to save memory."""
    try:
        files = data_files(Path(path).expanduser())
    except ColdStartError as e:
        raise PublicSetError(str(e)) from None
    rows = []
    for file in files:
        if file.suffix == ".parquet":
            import pyarrow.parquet as pq

            try:
                table = pq.read_table(file)
            except Exception as e:  # pyarrow raises several kinds for a file that is not parquet
                raise PublicSetError(f"{file}: not a parquet file ({' '.join(str(e).split())[:200]})") from None
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise PublicSetError(f"{file}: no {missing[0]!r} column (columns: {', '.join(table.column_names)})")
            if only is not None:
                table = table.select([c for c in table.column_names if c in only])
            if limit is not None:
                table = table.slice(0, max(0, limit - len(rows)))
            found = [(f"{file}: row {i}", row) for i, row in enumerate(table.to_pylist())]
        else:
            try:
                json_rows, places = read_rows_json(file)
            except ColdStartError as e:
                raise PublicSetError(str(e)) from None
            found = [(f"{file}: {place}", row) for place, row in zip(places, json_rows)]
            for where, row in found:
                missing = [c for c in columns if c not in row]
                if missing:
                    raise PublicSetError(f"{where}: no {missing[0]!r} column (columns: {', '.join(row)})")
        if not found and limit is None:
            raise PublicSetError(f"{file}: no rows")
        rows += found
        if limit is not None and len(rows) >= limit:
            break
    return rows[:limit]


def _text(row: dict, column: str, where: str, key: str | None = None, required: bool = True) -> str | None:
    """A text value of a row (or of the struct in `column`, at `key`); PublicSetError naming the row and
    column when it is missing (and required) or not text."""
    value, name = row.get(column), column
    if key is not None:
        if value is None and not required:
            return None
        if not isinstance(value, dict):
            raise PublicSetError(f"{where}: column {column!r} must be a struct with {key!r}, got "
                                 f"{type(value).__name__}")
        if required and value.get(key) is None:
            raise PublicSetError(f"{where}: column {column!r} has no {key!r} (keys: {', '.join(value)})")
        value, name = value.get(key), f"{column}.{key}"
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        got = "empty text" if isinstance(value, str) else type(value).__name__
        raise PublicSetError(f"{where}: column {name!r} must be non-empty text, got {got}")
    return value


def _task_name(*parts) -> str:
    name = "_".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^\w.-]+", "_", name).strip("_") or "task"


def _row_id(row: dict, index: int):
    return row["uuid"] if row.get("uuid") is not None else index


def _level(*values) -> int | None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        text = str(value or "").lower()
        m = re.fullmatch(r"(\d+)", text) or re.search(r"level_?(\d+)", text)
        if m:
            return int(m.group(1))
    return None


def _add_task(out: PublicSet, where: str, code: str, entry_point: str | None, name: str, level: int | None,
              seen: dict[str, Task], check: bool) -> Task | None:
    """The Task of one row's reference, added to `out` (or the earlier Task with the same source); None,
    counted in out.skipped, when the code is not a usable KernelBench-format reference."""
    try:
        source = kernelbench_source(code, entry_point)
    except NotKernelBench as e:
        out.skip(where, e.reason, e.detail)
        return None
    if source in seen:
        out.repeats += 1
        return seen[source]
    try:
        task = task_from_source(source, name, level, check=check)
    except TaskError as e:
        out.skip(where, "fails the task check", str(e))
        return None
    seen[source] = task
    out.tasks.append(task)
    return task


def _progress(rows: list, desc: str):
    from tqdm.auto import tqdm

    return tqdm(rows, desc=desc, unit="row", disable=len(rows) < 200, leave=False)


# -- the loaders ---------------------------------------------------------------------------------
def drkernel_rl_tasks(path, check: bool = True, limit: int | None = None) -> PublicSet:
    """Tasks from Dr. Kernel's RL prompt set (or its validation set), one per distinct reference."""
    rows = read_rows(path, ("reward_model", "extra_info"), limit, only=("data_source", "reward_model", "extra_info"))
    out, seen = PublicSet(str(path), read=len(rows)), {}
    for index, (where, row) in enumerate(_progress(rows, "drkernel-rl")):
        code = _text(row, "reward_model", where, key="ground_truth")
        entry = _text(row, "extra_info", where, key="entry_point", required=False) or "Model"
        extra = row["extra_info"] or {}
        uuid = next((extra[k] for k in ("uuid", "problem_id") if extra.get(k) is not None), index)
        name = _task_name(extra.get("name")) if extra.get("name") else _task_name(uuid, entry)
        level = _level(extra.get("level"), row.get("data_source"))
        _add_task(out, where, code, entry, name, level, seen, check)
    return out


def drkernel_cold_start(path, check: bool = True, limit: int | None = None) -> PublicSet:
    """Dr. Kernel's cold-start trajectories as SFT rows (all kept, with a `task` column) and their tasks."""
    rows = read_rows(path, ("messages",), limit)
    out, seen = PublicSet(str(path), read=len(rows)), {}
    for index, (where, row) in enumerate(_progress(rows, "drkernel-coldstart")):
        try:
            check_messages(row["messages"], f"{where}: column 'messages'")
        except ColdStartError as e:
            raise PublicSetError(str(e)) from None
        entry = _text(row, "entry_point", where, required=False) or "Model"
        code = _text(row, "original_python_code", where, required=False)
        if code is None:
            first = next((m["content"] for m in row["messages"] if m["role"] == "user"), "")
            code = reference_in_message(first, entry)
        task = None
        if code is None:
            out.skip(where, "no reference code in the first user message", f"no fenced block defines {entry}")
        else:
            name = _task_name(_row_id(row, index), entry)
            task = _add_task(out, where, code, entry, name, _level(row.get("level")), seen, check)
        out.sft_rows.append({**row, "task": task.name if task else None})
    return out


def kernelbook_pairs(path, check: bool = True, limit: int | None = None) -> PublicSet:
    """KernelBook's PyTorch/Triton pairs as Tasks and SFT rows (prompt for the task, Triton answer)."""
    rows = read_rows(path, KERNELBOOK_CODE + ("entry_point",), limit)
    out, seen = PublicSet(str(path), read=len(rows)), {}
    for index, (where, row) in enumerate(_progress(rows, "kernelbook")):
        python_code, triton_code = (_text(row, c, where) for c in KERNELBOOK_CODE)
        entry = _text(row, "entry_point", where)
        try:
            answer = renamed_class(triton_code.replace("\r\n", "\n"), f"{entry}New", "ModelNew", "triton_code")
        except NotKernelBench as e:
            out.skip(where, e.reason, e.detail)
            continue
        answer = answer if answer.endswith("\n") else answer + "\n"
        reply = f"```python\n{answer}```"
        if extract_code(reply) != (answer, "ok"):  # e.g. a ``` line inside the code
            out.skip(where, "triton_code does not survive code extraction")
            continue
        before = len(out.tasks)
        task = _add_task(out, where, python_code, entry, _task_name(_row_id(row, index), entry), None, seen, check)
        if task is None or len(out.tasks) == before:  # skipped, or a repeat: one SFT row per task
            continue
        metadata = {k: v for k, v in row.items() if k not in KERNELBOOK_CODE + ("original_triton_code",)}
        out.sft_rows.append({"messages": [{"role": "user", "content": initial_prompt(task)},
                                          {"role": "assistant", "content": reply}],
                             **metadata, "task": task.name})
    return out


def kernelbench_tasks(folder, check: bool = True) -> PublicSet:
    """A KernelBench checkout (or one of its level folders) through harness.task.load_tasks; files that do
    not load are counted in skipped instead of raised."""
    broken: list[str] = []
    try:
        tasks = load_tasks(Path(folder).expanduser(), check=check, broken=broken)
    except TaskError as e:
        raise PublicSetError(str(e)) from None
    out = PublicSet(str(folder), tasks=tasks, read=len(tasks) + len(broken))
    for line in broken:
        where, _, detail = line.partition(": ")
        out.skip(where, "does not load", detail)
    return out

