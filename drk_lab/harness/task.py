"""Tasks: one PyTorch reference problem in KernelBench format, and the loaders."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drk_lab.harness.sizes import derive_small_sizes, describe, is_ints, module_constants, resize_source
from drk_lab.harness.syntax import parse

REPO_DIR = Path(__file__).resolve().parents[2]  # the repository (data/, figures/, runs/)
DATA_DIR = REPO_DIR / "data"
BUILTIN_DIR = DATA_DIR / "tasks"
SOLUTIONS_DIR = DATA_DIR / "solutions"


class TaskError(ValueError):
    """A task source that cannot serve as a reference problem."""


@dataclass
class Task:
    name: str  # file stem, e.g. "19_ReLU"
    source: str  # the whole KernelBench-format Python source
    level: int | None = None
    path: str | None = None
    small_sizes: dict[str, int] = field(default_factory=dict)
    full_sizes: dict[str, object] = field(default_factory=dict)  # the file's values of the constants changed
    size_reason: str | None = None  # why they were changed ("the task's SMALL_SIZES", ...)

    @property
    def key(self) -> str:
        """Hash of the source: two tasks with the same key compute the same thing at the same sizes."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def constants(self) -> dict[str, object]:
        """Module-level constants with literal values (sizes, eps, ...); int arithmetic such as `2048 * 2`
        counts as a literal."""
        return {name: value for name, (value, _) in module_constants(parse(self.source)).items()}

    def resized(self, **sizes) -> Task:
        """The same task with module-level constants replaced, e.g. task.resized(batch_size=4): an int for
        an int, a tuple or list of ints for a tuple or list of ints (input_shape=(128,))."""
        return self.with_sizes(sizes)

    def with_sizes(self, sizes: dict, reason: str | None = None) -> Task:
        """resized(**sizes), with the reason for the note on which sizes ran (size_note)."""
        found = module_constants(parse(self.source))
        for name, value in sizes.items():
            if name not in found:
                raise TaskError(f"{self.name}: no module-level constant named {name!r}")
            old = found[name][0]
            if not is_ints(old):
                raise TaskError(f"{self.name}: constant {name!r} is {old!r}, not an int")
            if not is_ints(value) or isinstance(value, (tuple, list)) != isinstance(old, (tuple, list)):
                what = "an int" if type(old) is int else f"a {type(old).__name__} of ints"
                raise TaskError(f"{self.name}: new value for {name!r} must be {what}, got {value!r}")
        sizes = {k: type(found[k][0])(v) if isinstance(v, (tuple, list)) else v for k, v in sizes.items()}
        try:
            source = resize_source(self.source, sizes)
        except ValueError as e:
            raise TaskError(f"{self.name}: {e}") from None
        full = dict(self.full_sizes)
        for name, value in sizes.items():
            if found[name][0] != value:
                full.setdefault(name, found[name][0])
        return Task(self.name, source, self.level, self.path, dict(self.small_sizes), full,
                    reason or self.size_reason)

    def small(self) -> Task:
        """The task at small sizes, for the CPU interpreter path: its SMALL_SIZES, or sizes derived from its
        constants when it declares none (KernelBench files; harness/sizes.py says how). TaskError naming
        the sizes when even the smallest valid shape is too big for the CPU."""
        if self.small_sizes:
            return self.with_sizes(self.small_sizes, "the task's SMALL_SIZES")
        derived = derive_small_sizes(self.source)
        if derived.cost.too_big:
            now = {k: derived.sizes.get(k, v) for k, v in self.constants.items() if is_ints(v)}
            raise TaskError(f"{self.name}: cannot be made small enough for the CPU: at {describe(now) or 'its sizes'} "
                            f"it still needs {derived.cost.describe()}; run it on a GPU")
        if not derived.sizes:
            return self
        reason = "small sizes derived for the CPU"
        if derived.cost.stage < 3:
            reason += f"; only the batch: on the meta device {derived.cost.problem}"
        elif not derived.fits:
            reason += f"; the smallest valid shape still needs {derived.cost.describe()}"
        return self.with_sizes(derived.sizes, reason)

    def size_note(self) -> str | None:
        """Which sizes this task runs at when they are not the file's, for results and output."""
        if not self.full_sizes:
            return None
        now = self.constants
        return (f"sizes {describe({k: now[k] for k in self.full_sizes})} ({self.size_reason or 'resized'}; "
                f"full size {describe(self.full_sizes)})")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Task:
        return cls(**d)


def check_source(source: str, origin: str, run: bool = True) -> dict[str, int]:
    """Raise TaskError naming `origin` if the source is not a usable task; return its SMALL_SIZES.

    With run=True the module is executed and get_init_inputs()/get_inputs() are called on the
    meta device, so no memory is touched even at full size. Tasks are trusted code.
    """
    try:
        tree = parse(source, origin)
    except SyntaxError as e:
        raise TaskError(f"{origin}: syntax error at line {e.lineno}: {e.msg}") from None
    top = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name, kind in (("Model", ast.ClassDef), ("get_inputs", ast.FunctionDef), ("get_init_inputs", ast.FunctionDef)):
        if not isinstance(top.get(name), kind):
            what = "class" if kind is ast.ClassDef else "function"
            raise TaskError(f"{origin}: no top-level {what} {name!r}")
    small = module_constants(tree).get("SMALL_SIZES", ({}, None))[0]
    if not isinstance(small, dict) or not all(isinstance(v, int) for v in small.values()):
        raise TaskError(f"{origin}: SMALL_SIZES must be a dict of int constants")
    if run:
        _run_on_meta(source, origin)
    return small


OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")


@contextlib.contextmanager
def offline():
    """The Hugging Face libraries offline while task files run: a task that downloads a model (KernelBench's
    level4) then fails at once instead of after the hub's network retries. Tasks must be self-contained."""
    saved = {name: os.environ.get(name) for name in OFFLINE_VARIABLES}
    os.environ.update(dict.fromkeys(OFFLINE_VARIABLES, "1"))
    hub = sys.modules.get("huggingface_hub.constants")  # it reads the variable once, when first imported
    hub_saved = getattr(hub, "HF_HUB_OFFLINE", None)
    if hub is not None:
        hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if hub is not None:
            hub.HF_HUB_OFFLINE = hub_saved


def _one_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def _run_on_meta(source: str, origin: str) -> None:
    import torch

    namespace = {"__name__": "drk_task_check", "__file__": origin}
    with offline():
        try:
            exec(compile(source, origin, "exec"), namespace)
        except Exception as e:
            raise TaskError(f"{origin}: executing the module raised {_one_line(e)}") from None
        for fn in ("get_init_inputs", "get_inputs"):
            try:
                with torch.device("meta"):
                    value = namespace[fn]()
            except Exception as e:
                raise TaskError(f"{origin}: {fn}() raised {_one_line(e)}") from None
            if not isinstance(value, (list, tuple)):
                raise TaskError(f"{origin}: {fn}() must return a list, got {type(value).__name__}")


def task_from_source(source: str, name: str, level: int | None = None, path: str | None = None,
                     check: bool = True) -> Task:
    small = check_source(source, path or name, run=check)
    return Task(name=name, source=source, level=level, path=path, small_sizes=small)


def _level_of(path: Path) -> int | None:
    for part in reversed(path.parts[:-1]):
        m = re.fullmatch(r"level_?(\d+)", part.lower())
        if m:
            return int(m.group(1))
    return None


def load_task(path: str | Path, check: bool = True) -> Task:
    """A KernelBench-format file -> Task. Raises TaskError naming the file if it is malformed."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: {'a folder, not a task file' if path.is_dir() else 'no such file'}")
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{path}: cannot be read ({_one_line(e)})") from None
    return task_from_source(source, path.stem, _level_of(path.resolve()), str(path), check)


def _name_order(path: Path):
    # "2_Foo" before "10_Foo": KernelBench numbers its problems without padding.
    m = re.match(r"(\d+)", path.stem)
    return (str(path.parent), int(m.group(1)) if m else float("inf"), path.stem)


def load_tasks(folder: str | Path, check: bool = True, broken: list[str] | None = None) -> list[Task]:
    """Every task file under a folder (recursively), sorted by folder then problem number. A file that
    does not load raises TaskError, or with a `broken` list is skipped and its one-line reason appended."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskError(f"{folder}: no such folder")
    files = [p for p in folder.rglob("*.py") if not p.name.startswith("_")]
    tasks = []
    for path in sorted(files, key=_name_order):
        try:
            tasks.append(load_task(path, check))
        except TaskError as e:
            if broken is None:
                raise
            broken.append(str(e))
    return tasks


def task_from_row(row: dict, check: bool = True) -> Task:
    """A data-set row (e.g. KernelBench on the Hugging Face hub: code, name, level) -> Task."""
    source = row.get("code") or row.get("source") or row.get("pytorch_code")
    if not source:
        raise TaskError(f"row {row.get('name')!r}: no 'code' column")
    name = str(row.get("name") or row.get("problem_id") or "task")
    level = row.get("level")
    return task_from_source(source, Path(name).stem, int(level) if level is not None else None, None, check)


def builtin_tasks(level: int | None = None) -> list[Task]:
    """The project's own suite under data/tasks; level=None for all levels."""
    folders = sorted(BUILTIN_DIR.glob("level*")) if level is None else [BUILTIN_DIR / f"level{level}"]
    return [t for f in folders if f.is_dir() for t in load_tasks(f)]


def builtin_solution(task: Task) -> str:
    """Source of the project's reference Triton solution for a built-in task."""
    path = SOLUTIONS_DIR / f"level{task.level}" / f"{task.name}.py"
    if not path.is_file():
        raise TaskError(f"{task.name}: no built-in solution at {path}")
    return path.read_text()


ROW_FILES = (".jsonl", ".jsonl.gz")


def load_task_set(spec: str, broken: list[str] | None = None) -> list:
    """Comma-separated parts: `builtin` (all levels), `builtin:LEVEL`, a task file, a folder of task
    files (e.g. a KernelBench checkout or one of its levels), or a JSON-lines file of task rows with an
    optional split (`data/rl/prompts.jsonl.gz:heldout`; relative to the repository when not found here).
    TaskError names a part that is none of these; a broken file in a folder raises too, or with a `broken`
    list is skipped (load_tasks)."""
    tasks = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        rows, _, split = part.partition(":")
        if part == "builtin" or part.startswith("builtin:"):
            tasks += builtin_tasks(_builtin_level(part))
        elif rows.endswith(ROW_FILES):
            tasks += row_tasks(rows if Path(rows).is_file() else in_repo(rows), split or None)
        elif Path(part).is_dir():
            tasks += load_tasks(part, broken=broken)
        elif Path(part).is_file():
            tasks.append(load_task(part))
        else:
            raise TaskError(f"{part}: neither builtin[:LEVEL] nor a task file, folder or .jsonl(.gz) of rows")
    return tasks


def row_tasks(path: str | Path, split: str | None = None) -> list[Task]:
    """The tasks of a JSON-lines file of rows (name, level, code; data/rl's prompt sets), of `split` only when
    given, in file order."""
    import gzip
    import json

    if not Path(path).is_file():
        raise TaskError(f"{path}: no such file of task rows")
    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    chosen = [row for row in rows if split is None or row.get("split") == split]
    if split is not None and not chosen:
        splits = ", ".join(sorted({str(r.get("split")) for r in rows}))
        raise TaskError(f"{path}: no row of split {split!r} (splits: {splits})")
    return [task_from_row(row, check=False) for row in chosen]


def _builtin_level(part: str) -> int | None:
    level = part.partition(":")[2]
    if not level:
        return None
    levels = sorted(int(p.name[5:]) for p in BUILTIN_DIR.glob("level*") if p.name[5:].isdigit())
    if not level.isdigit() or int(level) not in levels:
        raise TaskError(f"{part}: LEVEL must be one of {', '.join(map(str, levels))} (builtin:1)")
    return int(level)


def in_repo(path: str | Path) -> Path:
    """A path relative to the repository (notebooks run from notebooks/, scripts from anywhere)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO_DIR / path
