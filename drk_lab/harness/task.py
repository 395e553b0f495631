"""Tasks: one PyTorch reference problem in KernelBench format, and the loaders."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

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

    @property
    def key(self) -> str:
        """Hash of the source: two tasks with the same key compute the same thing at the same sizes."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def constants(self) -> dict[str, object]:
        """Module-level constants with literal values (sizes, eps, ...)."""
        return {name: value for name, (value, _) in _module_constants(ast.parse(self.source)).items()}

    def resized(self, **sizes: int) -> Task:
        """The same task with module-level int constants replaced, e.g. task.resized(batch_size=4)."""
        found = _module_constants(ast.parse(self.source))
        edits = []
        for name, value in sizes.items():
            if name not in found:
                raise TaskError(f"{self.name}: no module-level constant named {name!r}")
            old, node = found[name]
            if not isinstance(old, int) or isinstance(old, bool):
                raise TaskError(f"{self.name}: constant {name!r} is {old!r}, not an int")
            if not isinstance(value, int) or isinstance(value, bool):
                raise TaskError(f"{self.name}: new value for {name!r} must be an int, got {value!r}")
            edits.append((node, str(value)))
        return Task(self.name, _replace_nodes(self.source, edits), self.level, self.path, dict(self.small_sizes))

    def small(self) -> Task:
        """The task at its declared small sizes (SMALL_SIZES), for the CPU interpreter path."""
        return self.resized(**self.small_sizes) if self.small_sizes else self

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Task:
        return cls(**d)


def _module_constants(tree: ast.Module) -> dict[str, tuple[object, ast.expr]]:
    constants = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            target, value_node = stmt.targets[0].id, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            target, value_node = stmt.target.id, stmt.value
        else:
            continue
        try:
            constants[target] = (ast.literal_eval(value_node), value_node)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
    return constants


def _replace_nodes(source: str, edits: list[tuple[ast.expr, str]]) -> str:
    data = source.encode()
    offsets = [0]  # byte offset of each line start; ast counts lines at \n only
    for line in data.split(b"\n"):
        offsets.append(offsets[-1] + len(line) + 1)
    spans = []
    for node, text in edits:
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[node.end_lineno - 1] + node.end_col_offset
        spans.append((start, end, text.encode()))
    for start, end, text in sorted(spans, reverse=True):
        data = data[:start] + text + data[end:]
    return data.decode()


def check_source(source: str, origin: str, run: bool = True) -> dict[str, int]:
    """Raise TaskError naming `origin` if the source is not a usable task; return its SMALL_SIZES.

    With run=True the module is executed and get_init_inputs()/get_inputs() are called on the
    meta device, so no memory is touched even at full size. Tasks are trusted code.
    """
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as e:
        raise TaskError(f"{origin}: syntax error at line {e.lineno}: {e.msg}") from None
    top = {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name, kind in (("Model", ast.ClassDef), ("get_inputs", ast.FunctionDef), ("get_init_inputs", ast.FunctionDef)):
        if not isinstance(top.get(name), kind):
            what = "class" if kind is ast.ClassDef else "function"
            raise TaskError(f"{origin}: no top-level {what} {name!r}")
    small = _module_constants(tree).get("SMALL_SIZES", ({}, None))[0]
    if not isinstance(small, dict) or not all(isinstance(v, int) for v in small.values()):
        raise TaskError(f"{origin}: SMALL_SIZES must be a dict of int constants")
    if run:
        _run_on_meta(source, origin)
    return small


def _run_on_meta(source: str, origin: str) -> None:
    import torch

    namespace = {"__name__": "drk_task_check", "__file__": origin}
    try:
        exec(compile(source, origin, "exec"), namespace)
    except Exception as e:
        raise TaskError(f"{origin}: executing the module raised {type(e).__name__}: {e}") from None
    for fn in ("get_init_inputs", "get_inputs"):
        try:
            with torch.device("meta"):
                value = namespace[fn]()
        except Exception as e:
            raise TaskError(f"{origin}: {fn}() raised {type(e).__name__}: {e}") from None
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
        raise TaskError(f"{path}: no such file")
    return task_from_source(path.read_text(), path.stem, _level_of(path.resolve()), str(path), check)


def _name_order(path: Path):
    # "2_Foo" before "10_Foo": KernelBench numbers its problems without padding.
    m = re.match(r"(\d+)", path.stem)
    return (str(path.parent), int(m.group(1)) if m else float("inf"), path.stem)


def load_tasks(folder: str | Path, check: bool = True) -> list[Task]:
    """Every task file under a folder (recursively), sorted by folder then problem number."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskError(f"{folder}: no such folder")
    files = [p for p in folder.rglob("*.py") if not p.name.startswith("_")]
    return [load_task(p, check) for p in sorted(files, key=_name_order)]


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


def load_task_set(spec: str) -> list:
    """Comma-separated parts: `builtin` (all levels), `builtin:LEVEL`, a task file, or a folder of task
    files (e.g. a KernelBench checkout or one of its levels)."""
    tasks = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        if part == "builtin" or part.startswith("builtin:"):
            level = part.partition(":")[2]
            tasks += builtin_tasks(int(level) if level else None)
        elif Path(part).is_dir():
            tasks += load_tasks(part)
        elif Path(part).is_file():
            tasks.append(load_task(part))
        else:
            raise TaskError(f"{part!r} is neither builtin[:LEVEL] nor a task file or folder")
    return tasks


def in_repo(path: str | Path) -> Path:
    """A path relative to the repository (notebooks run from notebooks/, scripts from anywhere)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else REPO_DIR / path
