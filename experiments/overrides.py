"""Override files of the experiments, as nanoGPT's config/ has them: `config/<name>.py` holds statements
`part.name = literal` (and `seed = literal`), read without running them."""

from __future__ import annotations

import ast
from pathlib import Path


def literal(text: str):
    """A --set value: a Python literal, else the text itself (an advantage's name, say)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def read_overrides(name_or_path: str, config_dir: Path) -> dict:
    """{"part.name": value} of config_dir/<name>.py, or of a path ending in .py."""
    path = Path(name_or_path)
    path = path if path.suffix == ".py" else config_dir / f"{name_or_path}.py"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in config_dir.glob("*.py")))
        raise FileNotFoundError(f"{name_or_path}: no such config (config/ holds {known})")
    changes = {}
    for node in ast.parse(path.read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
            changes[f"{target.value.id}.{target.attr}"] = ast.literal_eval(node.value)
        elif isinstance(target, ast.Name) and target.id == "seed":
            changes["seed"] = ast.literal_eval(node.value)
        else:
            raise ValueError(f"{path}:{node.lineno}: expected `part.name = literal`")
    return changes
