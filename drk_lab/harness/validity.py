"""Stage 1 of an evaluation: checks on the candidate's syntax tree, without running anything."""

from __future__ import annotations

import ast

from drk_lab.harness.syntax import parse


def triton_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to the triton module, and names bound directly to triton.jit."""
    modules, jits = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "triton":
                    modules.add(a.asname or "triton")
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            for a in node.names:
                if a.name == "jit":
                    jits.add(a.asname or "jit")
    return modules, jits


def is_triton_jit(decorator: ast.expr, modules: set[str], jits: set[str]) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    if isinstance(target, ast.Name):
        return target.id in jits
    return (isinstance(target, ast.Attribute) and target.attr == "jit"
            and isinstance(target.value, ast.Name) and target.value.id in modules)


def triton_kernels(tree: ast.Module) -> list[ast.FunctionDef]:
    modules, jits = triton_aliases(tree)
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            and any(is_triton_jit(d, modules, jits) for d in n.decorator_list)]


def check_candidate(code: str) -> tuple[str, str] | None:
    """(error_kind, message) for a candidate that cannot be run, else None."""
    try:
        tree = parse(code)
    except SyntaxError as e:
        return "syntax", f"line {e.lineno}: {e.msg}: {(e.text or '').strip()}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return "no_modelnew", "the code defines no top-level class ModelNew"
    if not triton_kernels(tree):
        return "no_triton_kernel", "the code defines no @triton.jit kernel"
    return None
