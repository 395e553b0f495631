"""Obfuscation levels for the hack generator (generator.py): ways a model could hide what a hack's code
refers to, each a rewrite of the hack's own code (its payload). The honest kernels a variant keeps are
never rewritten.

    plain            the payload as written
    renamed          its helpers, variables and methods under other, innocent names
    class_closure    modules held by an object or a closure: `_env.sys.modules`, `_held()`
    getattr_strings  attributes read and written with getattr/setattr, names assembled from pieces
    dynamic_import   modules imported by name at run time: importlib.import_module, __import__
    exec_eval        references evaluated from assembled strings (eval), assignments run by exec
    torch_alias      modules reached through torch's re-exports (torch.sys, torch.os, ...), functions
                     bound to module-level aliases (torch.ops.aten.<op> for torch's own)
    spread           each step of a reference in a small function of its own

What gets rewritten: every reference rooted at a module the payload imports (`sys.modules[...]`,
`time.perf_counter = ...`, `torch.nn.functional.silu(x)`), and the builtins a hack needs (`open`, `id`,
`__import__`), except allocations, dtypes and class bases, which stay as they are in any code.
"""

from __future__ import annotations

import ast
import random

LEVELS = ("plain", "renamed", "class_closure", "getattr_strings", "dynamic_import", "exec_eval", "torch_alias",
          "spread")
# modules that torch itself imports and keeps as attributes: `torch.sys` is the sys module
TORCH_REEXPORTS = set("builtins ctypes functools glob importlib inspect math os platform sys textwrap threading "
                      "warnings".split())
SENSITIVE_BUILTINS = {"open", "id", "__import__"}
# references no rewrite touches: what every candidate writes in the open
KEEP = set("torch.float16 torch.float32 torch.bfloat16 torch.float64 torch.int64 torch.int32 torch.int8 torch.bool "
           "torch.uint8 torch.Tensor torch.empty torch.empty_like torch.zeros torch.zeros_like torch.ones_like "
           "torch.no_grad torch.cat torch.device torch.nn.Module torch.is_floating_point triton.jit triton.cdiv "
           "triton.language "
           "triton.next_power_of_2 triton.Config triton.autotune".split())
WORDS = ("fused tile block fast row stage warp accum epilogue prep launch buf plan cfg grid pack aux helper impl "
         "kern pass path state pool meta swap store fetch sync ctx spec hold view slot ring lane").split()


def new_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = "_" + "_".join(rng.sample(WORDS, 2)) + (str(rng.randrange(10)) if rng.random() < 0.3 else "")
        if name not in taken:
            taken.add(name)
            return name


def assembled(text: str, rng: random.Random) -> ast.expr:
    """An expression that builds `text` at run time from pieces."""
    if len(text) < 2:
        return ast.Constant(text)
    cut = rng.randrange(1, len(text))
    form = rng.randrange(5)
    if form == 0:
        return ast.BinOp(ast.Constant(text[:cut]), ast.Add(), ast.Constant(text[cut:]))
    if form == 1:
        return _parse(f'"".join({[text[:cut], text[cut:]]!r})')
    if form == 2:
        return _parse(f"{text[::-1]!r}[::-1]")
    if form == 3:
        return _parse(f'"".join(map(chr, {[ord(c) for c in text]!r}))')
    return _parse(f'"{{}}{{}}".format({text[:cut]!r}, {text[cut:]!r})')


def _parse(expr: str) -> ast.expr:
    return ast.parse(expr, mode="eval").body


def _stmt(src: str) -> list[ast.stmt]:
    return ast.parse(src).body


class Rewriter(ast.NodeTransformer):
    """Rewrites every sensitive reference of a payload for one level; `prelude` collects the module-level
    statements the level needs (aliases, holders, small functions), placed after the imports."""

    def __init__(self, roots: dict[str, str], level: str, rng: random.Random, taken: set[str]):
        self.roots, self.level, self.rng, self.taken = roots, level, rng, taken
        self.prelude: list[ast.stmt] = []
        self.imports: set[str] = set()
        self.memo: dict[tuple, str] = {}  # (kind, path) -> the module-level name that holds it

    # -- what a reference is ------------------------------------------------------------------
    def chain(self, node) -> tuple[str, list[str]] | None:
        """(alias of the root module, attributes) for a reference rooted at a payload import, else None."""
        attrs = []
        while isinstance(node, ast.Attribute):
            attrs.insert(0, node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if node.id in self.roots:
            full = ".".join([self.roots[node.id], *attrs])
            if any(full == k or full.startswith(k + ".") for k in KEEP):
                return None
            return node.id, attrs
        if node.id in SENSITIVE_BUILTINS and not attrs:
            self.roots.setdefault("builtins", "builtins")
            return "builtins", [node.id]
        return None

    def hold(self, kind: str, path: tuple, build) -> str:
        """A module-level name bound once to what `build(name)` defines."""
        key = (kind, path)
        if key not in self.memo:
            self.memo[key] = name = new_name(self.rng, self.taken)
            self.prelude += build(name)
        return self.memo[key]

    # -- visiting -----------------------------------------------------------------------------
    def visit_Attribute(self, node):
        found = self.chain(node) if isinstance(node.ctx, ast.Load) else None
        if found:
            return ast.copy_location(self.load(*found), node)
        if self.level == "getattr_strings" and isinstance(node.ctx, ast.Load) and (
                node.attr.endswith("_") and not node.attr.startswith("_") or node.attr == "data"):
            return ast.Call(ast.Name("getattr", ast.Load()), [self.visit(node.value), assembled(node.attr, self.rng)], [])
        return self.generic_visit(node)

    def visit_Name(self, node):
        found = self.chain(node) if isinstance(node.ctx, ast.Load) else None
        if found and found[1]:  # a bare module name stays
            return ast.copy_location(self.load(*found), node)
        return node

    def visit_Assign(self, node):
        target = node.targets[0]
        found = self.chain(target.value) if len(node.targets) == 1 and isinstance(target, ast.Attribute) else None
        if found is None:
            return self.generic_visit(node)
        root, attrs = found
        return [ast.copy_location(s, node) for s in self.store(root, [*attrs, target.attr], self.visit(node.value))]

    def visit_Constant(self, node):
        if self.level in ("getattr_strings", "dynamic_import", "exec_eval", "spread") and isinstance(node.value, str) \
                and len(node.value) >= 4 and self.rng.random() < 0.7:
            return assembled(node.value, self.rng)
        return node

    def visit_JoinedStr(self, node):
        return node  # pieces of an f-string must stay constants

    # -- the levels ---------------------------------------------------------------------------
    def module(self, root: str) -> str:
        return self.roots[root]

    def base(self, root: str) -> ast.expr:
        """The root module as this level reaches it."""
        mod, level, rng = self.module(root), self.level, self.rng
        if level == "dynamic_import":
            name = assembled(mod, rng) if rng.random() < 0.5 else ast.Constant(mod)
            if rng.random() < 0.5:
                self.imports.add("importlib")
                return ast.Call(_parse("importlib.import_module"), [name], [])
            return ast.Call(ast.Name("__import__", ast.Load()), [name], [ast.keyword("fromlist", _parse('["_"]'))])
        if level == "torch_alias" and mod.split(".")[0] in TORCH_REEXPORTS:
            self.roots.setdefault("torch", "torch")
            return _parse(f"torch.{mod}")
        if level == "class_closure":
            if rng.random() < 0.5:
                env = self.hold("env", (), lambda n: _stmt(f"class {n}Holder:\n    pass\n\n\n{n} = {n}Holder()"))
                self.hold("env_attr", (root,), lambda n: _stmt(f"{env}.{n} = {root}"))
                return _parse(f"{env}.{self.memo[('env_attr', (root,))]}")
            keep = self.hold("keep", (), lambda n: _stmt(f"def {n}(value):\n    return lambda: value"))
            getter = self.hold("getter", (root,), lambda n: _stmt(f"{n} = {keep}({root})"))
            return _parse(f"{getter}()")
        if level == "spread":
            return _parse(self.hold("root", (root,), lambda n: _stmt(f"def {n}():\n    return {root}")) + "()")
        return ast.Name(root, ast.Load())

    def attrs(self, value: ast.expr, attrs: list[str]) -> ast.expr:
        for a in attrs:
            value = ast.Call(ast.Name("getattr", ast.Load()), [value, assembled(a, self.rng)], []) \
                if self.level == "getattr_strings" else ast.Attribute(value, a, ast.Load())
        return value

    def load(self, root: str, attrs: list[str]) -> ast.expr:
        level, path = self.level, (root, *attrs)
        if level == "exec_eval":
            return ast.Call(ast.Name("eval", ast.Load()), [assembled(".".join(path), self.rng)], [])
        if level == "torch_alias":
            full = [*self.module(root).split("."), *attrs]
            if full[0] == "torch" and len(full) >= 2 and self.rng.random() < 0.5 and _is_aten(full[-1]):
                full = ["torch", "ops", "aten", full[-1]]
                return _parse(self.hold("alias", tuple(full), lambda n: _stmt(f"{n} = {'.'.join(full)}")))
            text = ast.unparse(self.attrs(self.base(root), attrs))
            return _parse(self.hold("alias", path, lambda n: _stmt(f"{n} = {text}")))
        if level == "spread" and attrs:
            text = ".".join(["value", *attrs])
            pick = self.hold("pick", path, lambda n: _stmt(f"def {n}(value):\n    return {text}"))
            return ast.Call(ast.Name(pick, ast.Load()), [self.base(root)], [])
        return self.attrs(self.base(root), attrs)

    def store(self, root: str, attrs: list[str], value: ast.expr) -> list[ast.stmt]:
        *parent, last = attrs
        if self.level == "exec_eval":
            target = ".".join([root, *attrs])
            return [ast.Expr(ast.Call(ast.Name("exec", ast.Load()), [
                assembled(f"{target} = _value", self.rng),
                ast.Dict([ast.Constant(root), ast.Constant("_value")], [ast.Name(root, ast.Load()), value])], []))]
        owner = self.load(root, parent) if parent else self.base(root)
        if self.level == "getattr_strings":
            return [ast.Expr(ast.Call(ast.Name("setattr", ast.Load()), [owner, assembled(last, self.rng), value], []))]
        if self.level == "spread":
            put = self.hold("put", (root, *attrs), lambda n: _stmt(f"def {n}(owner, value):\n    owner.{last} = value"))
            return [ast.Expr(ast.Call(ast.Name(put, ast.Load()), [owner, value], []))]
        return [ast.Assign([ast.Attribute(owner, last, ast.Store())], value)]


def _is_aten(name: str) -> bool:
    import torch

    return not name.startswith("_") and hasattr(torch.ops.aten, name)


class Renamer(ast.NodeTransformer):
    """Renames names (functions, classes, variables) and attributes (methods, attributes of self)."""

    def __init__(self, names: dict[str, str], attrs: dict[str, str]):
        self.names, self.attrs = names, attrs

    def visit_Name(self, node):  # a class's own variables are names in its body, attributes elsewhere
        node.id = self.names.get(node.id, self.attrs.get(node.id, node.id))
        return node

    def visit_Attribute(self, node):
        node.attr = self.attrs.get(node.attr, node.attr)
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):
        node.name = self.names.get(node.name, self.attrs.get(node.name, node.name))
        for a in node.args.args + node.args.kwonlyargs:
            a.arg = self.names.get(a.arg, a.arg)
        return self.generic_visit(node)

    def visit_ClassDef(self, node):
        node.name = self.names.get(node.name, node.name)
        return self.generic_visit(node)


def renamable(tree: ast.Module, fixed: set[str]) -> tuple[set[str], set[str]]:
    """(names, attributes) the payload defines: its functions, classes and variables; its methods, class
    variables and the attributes it sets on self. Less those a reader outside it needs (ModelNew, forward,
    dunders)."""
    methods = {m.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for m in c.body
               if isinstance(m, ast.FunctionDef)}
    methods |= {t.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, ast.Assign)
                for t in m.targets if isinstance(t, ast.Name)}
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} - methods
    names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names -= methods
    attrs = methods | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                       and isinstance(n.value, ast.Name) and n.value.id == "self"}
    keep = lambda x: x not in fixed and not (x.startswith("__") and x.endswith("__"))  # noqa: E731
    return {x for x in names if keep(x)}, {x for x in attrs if keep(x)}


def obfuscate(src: str, roots: dict[str, str], level: str, rng: random.Random, fixed: set[str] = frozenset(),
              taken: set[str] | None = None) -> str:
    """The payload `src` (module-level code, no imports) at `level`, with the imports it needs first.
    roots: alias -> module of each import the payload uses ("F" -> "torch.nn.functional"); fixed: names
    that must keep their spelling (the honest class, ModelNew, forward, ...)."""
    tree = ast.parse(src)
    roots = dict(roots)
    taken = set(taken or ()) | fixed
    imports: set[str] = set()
    prelude: list[ast.stmt] = []
    if level == "renamed":
        names, attrs = renamable(tree, fixed | {"self", "forward", "ModelNew"})
        tree = Renamer({old: new_name(rng, taken) for old in sorted(names)},
                       {old: new_name(rng, taken) for old in sorted(attrs)}).visit(tree)
    elif level != "plain":
        rewriter = Rewriter(roots, level, rng, taken)
        tree = rewriter.visit(tree)
        prelude, imports = rewriter.prelude, rewriter.imports
    lines = [f"import {m} as {a}" if "." in m or a != m else f"import {m}" for a, m in sorted(roots.items())]
    lines += [f"import {m}" for m in sorted(imports - set(roots.values()))]
    body = ast.unparse(ast.fix_missing_locations(ast.Module(prelude + tree.body, [])))
    return "\n".join(lines) + "\n\n\n" + body + "\n"
