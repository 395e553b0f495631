"""What a candidate's syntax tree says, before any rule judges it: which dotted names its expressions
refer to (through imports and simple aliases), its kernels and methods, which functions launch a Triton
kernel or compute with PyTorch, and how values are built. The static rules (static/rules.py) ask it."""

from __future__ import annotations

import ast
import functools
import sys
import types

from drk_lab.hacks.static.names import (
    BUILTIN_NAMES, DYNAMIC_IMPORTS, ENV_SETTERS, GETATTRS, STREAM_CREATORS, TENSOR_COMPUTE_METHODS, TORCH_NON_COMPUTE)

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# attributes and methods of a pathlib path that are paths again (.name, .stem, .suffix, ... are strings)
PATH_ATTRS = {"parent", "parents"}
PATH_METHODS = set("absolute resolve expanduser with_name with_stem with_suffix joinpath relative_to home cwd "
                   "readlink with_segments".split())
# tests of the mode a forward runs in: training or eval, autograd on or off, compiled or scripted
MODE_ATTRS = {"training", "requires_grad", "grad_fn"}
MODE_CALLS = set("torch.is_grad_enabled torch.is_inference_mode_enabled torch.jit.is_scripting torch.jit.is_tracing "
                 "torch.compiler.is_compiling torch._dynamo.is_compiling".split())


@functools.lru_cache(maxsize=4096)
def canonical(dotted: str) -> str:
    """A dotted name under the module that really holds it: `torch.sys.modules` is `sys.modules` (torch
    imports sys and keeps it as an attribute; many modules re-export others so). Walks only modules already
    imported here, through their own namespaces, so nothing is imported or run."""
    parts = dotted.split(".")
    module, used = sys.modules.get(parts[0]), 1
    if not isinstance(module, types.ModuleType):
        return dotted
    while used < len(parts) and isinstance(inner := vars(module).get(parts[used]), types.ModuleType):
        module, used = inner, used + 1
    return ".".join([module.__name__, *parts[used:]]) if used > 1 else dotted


def const_str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def forward_params(fn) -> set[str]:
    """The input names of a forward method (whose arithmetic on them is computing), else nothing."""
    return {a.arg for a in fn.args.args[1:]} if fn.name == "forward" else set()


def last_binding(fn, name: str, before: int):
    """The value last bound to a local name above a line (None when a loop, a with or a tuple binds it):
    a name rebound after its torch.empty holds the later value."""
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
              and n.lineno < before]
    if not stores:
        return None
    last = max(stores, key=lambda n: (n.lineno, n.col_offset))
    return next((a.value for a in ast.walk(fn) if isinstance(a, (ast.Assign, ast.AnnAssign))
                 and last in (a.targets if isinstance(a, ast.Assign) else [a.target])), None)


class CandidateTree:
    """A parsed candidate and what its names refer to."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.nodes = list(ast.walk(tree))
        self.defs = {n.name: n for n in tree.body if isinstance(n, (*FUNCTIONS, ast.ClassDef))}
        self.shadowed = set(self.defs) | {t.id for n in tree.body if isinstance(n, ast.Assign)
                                          for t in n.targets if isinstance(t, ast.Name)}
        self.aliases: dict[str, str] = {}
        for n in self.nodes:
            if isinstance(n, ast.Import):
                for a in n.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                self.aliases.update({a.asname or a.name: f"{n.module}.{a.name}" for a in n.names if a.name != "*"})
        for _ in range(3):  # `cuda = torch.cuda`, `run = sp.run`, `(m := torch.cuda)`, chained a few deep
            for n in self.nodes:
                target = n.targets[0] if isinstance(n, ast.Assign) and len(n.targets) == 1 else (
                    n.target if isinstance(n, ast.NamedExpr) else None)
                if isinstance(target, ast.Name) and target.id not in self.aliases and (q := self.resolve(n.value)):
                    self.aliases[target.id] = q
        self.kernels = {n.name for n in self.nodes if isinstance(n, ast.FunctionDef) and "triton.jit" in self.decorators(n)}
        self.self_modules = {t.attr for n in self.nodes if isinstance(n, ast.Assign) for t in n.targets
                             if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
                             and isinstance(n.value, ast.Call) and self._builds_module(n.value)}
        self.classes = {c.name: c for c in self.nodes if isinstance(c, ast.ClassDef)}
        # the class each node sits in (the innermost one): `self.f()` there means that class's method
        self.owner = {id(x): c.name for c in self.classes.values() for x in ast.walk(c)}
        self._memo: dict[tuple[str, int], bool] = {}
        self.methods = self.class_methods("ModelNew")

    def class_methods(self, name: str, seen: frozenset = frozenset()) -> dict:
        """A class's methods by name: its own, then those of its bases defined in the file (a later
        class's method of the same name never hides them)."""
        c = self.classes.get(name)
        if c is None or name in seen:
            return {}
        found: dict = {}
        for base in reversed(c.bases):
            if isinstance(base, ast.Name):
                found.update(self.class_methods(base.id, seen | {name}))
        found.update({m.name: m for m in c.body if isinstance(m, FUNCTIONS)})
        return found

    def method_of(self, node, name: str):
        """The method `self.<name>` means where `node` sits (ModelNew's, outside any class)."""
        return self.class_methods(self.owner.get(id(node), "ModelNew")).get(name)

    def resolve(self, node) -> str | None:
        """The dotted name an expression refers to (`T.cuda.Stream` -> "torch.cuda.Stream"), or None."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return canonical(self.aliases[node.id])
            return f"builtins.{node.id}" if node.id in BUILTIN_NAMES and node.id not in self.shadowed else None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return canonical(f"{base}.{node.attr}") if base else None
        if isinstance(node, ast.Subscript) and self.resolve(node.value) == "sys.modules":
            return const_str(node.slice)
        if isinstance(node, ast.Call) and self.resolve(node.func) == "torch.get_device_module":
            return "torch.cuda"  # the device's module, whatever the device: torch.cuda here
        if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(getter := node.func, ast.Call) and \
                getter.args and self.resolve(getter.func) == "operator.attrgetter" and \
                (path := const_str(getter.args[0])):
            base = self.resolve(node.args[0])  # operator.attrgetter("cuda.synchronize")(torch)
            return f"{base}.{path}" if base else None
        if isinstance(node, ast.Call) and node.args:
            func, first = self.resolve(node.func), node.args[0]
            if func in GETATTRS and len(node.args) >= 2 and const_str(node.args[1]):
                base = self.resolve(first)
                return f"{base}.{node.args[1].value}" if base else None
            if func in DYNAMIC_IMPORTS and const_str(first):
                return first.value.split(".")[0] if func.endswith("__import__") else first.value
            if func == "builtins.vars" and (base := self.resolve(first)):
                return f"{base}.__dict__"
        return None

    def decorators(self, fn) -> set[str | None]:
        return {self.resolve(d.func if isinstance(d, ast.Call) else d) for d in fn.decorator_list}

    def _builds_module(self, call: ast.Call) -> bool:
        q = self.resolve(call.func) or ""
        return (q.startswith("torch.nn.") and not q.startswith(("torch.nn.functional", "torch.nn.Parameter",
                                                                 "torch.nn.parameter"))) or (
            isinstance(call.func, ast.Name) and call.func.id == "Model")

    def is_path(self, node, depth: int = 0) -> bool:
        """Whether an expression is a pathlib path (built by pathlib, directly or through names)."""
        if depth > 5:
            return False
        if isinstance(node, ast.Call):
            q = self.resolve(node.func) or ""
            return q.startswith("pathlib.") or (isinstance(node.func, ast.Attribute) and node.func.attr in PATH_METHODS
                                                and self.is_path(node.func.value, depth + 1))
        if isinstance(node, ast.Attribute):
            return node.attr in PATH_ATTRS and self.is_path(node.value, depth + 1)
        if isinstance(node, ast.Subscript):  # p.parents[0]
            return self.is_path(node.value, depth + 1)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, ast.Div) and self.is_path(node.left, depth + 1)
        if isinstance(node, ast.Name):
            return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)
                       and self.is_path(n.value, depth + 1) for n in self.nodes)
        return False

    def reachable_functions(self) -> list[ast.FunctionDef]:
        """Functions (and methods) in ModelNew or reachable from it through names of local definitions."""
        if "ModelNew" not in self.defs:
            return []
        seen, todo = {"ModelNew"}, [self.defs["ModelNew"]]
        while todo:
            for n in ast.walk(todo.pop()):
                if isinstance(n, ast.Name) and n.id in self.defs and n.id not in seen and n.id not in self.kernels:
                    seen.add(n.id)
                    todo.append(self.defs[n.id])
        return [f for name in seen for f in ast.walk(self.defs[name])
                if isinstance(f, FUNCTIONS) and f.name not in self.kernels]

    def local_callee(self, call: ast.Call):
        f = call.func
        if isinstance(f, ast.Name) and isinstance(self.defs.get(f.id), FUNCTIONS):
            return self.defs[f.id]
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return self.method_of(call, f.attr)
        return None

    def launches(self, fn) -> bool:
        key = ("launch", id(fn))
        if key not in self._memo:
            self._memo[key] = False
            self._memo[key] = any(isinstance(n, ast.Name) and n.id in self.kernels for n in ast.walk(fn)) or any(
                isinstance(n, ast.Call) and (callee := self.local_callee(n)) is not None and self.launches(callee)
                for n in ast.walk(fn))
        return self._memo[key]

    def computes(self, fn) -> bool:
        """A local function that computes with PyTorch (or the reference) and launches no Triton kernel."""
        key = ("compute", id(fn))
        if key not in self._memo:
            self._memo[key] = False
            self._memo[key] = self.torch_compute(fn.body, forward_params(fn)) is not None and not self.launches(fn)
        return self._memo[key]

    def torch_compute(self, stmts: list, params: set[str]):
        """The first expression in `stmts` that computes with PyTorch or the reference, or None."""
        for n in (x for s in stmts for x in ast.walk(s)):
            if isinstance(n, ast.BinOp) and (isinstance(n.op, ast.MatMult) or any(
                    isinstance(o, ast.Name) and o.id in params for o in (n.left, n.right))):
                return n
            if not isinstance(n, ast.Call):
                continue
            f, q = n.func, self.resolve(n.func)
            if q:
                if (q.startswith("torch.") and q.split(".")[1] not in TORCH_NON_COMPUTE) or q.startswith("reference."):
                    return n
                continue
            if isinstance(f, ast.Name) and f.id == "Model":
                return n
            if (callee := self.local_callee(n)) is not None:
                if self.computes(callee):
                    return n
                continue
            if isinstance(f, ast.Attribute):
                receiver = f.value
                if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                    if f.attr in ("forward", "__call__"):
                        return n
                elif isinstance(receiver, ast.Name) and receiver.id == "self":
                    if f.attr in self.self_modules:
                        return n
                elif f.attr.rstrip("_") in TENSOR_COMPUTE_METHODS:
                    return n
        return None

    def is_device_test(self, test) -> bool:
        for n in ast.walk(test):
            if isinstance(n, ast.Attribute) and (n.attr in ("is_cuda", "is_cpu") or (
                    n.attr == "type" and isinstance(n.value, ast.Attribute) and n.value.attr == "device")):
                return True
            if isinstance(n, ast.Compare) and any(isinstance(x, ast.Attribute) and x.attr == "device"
                                                  for x in [n.left, *n.comparators]):
                return True
            q = self.resolve(n) if isinstance(n, (ast.Attribute, ast.Name)) else None
            if q and q.startswith(("torch.cuda.is_available", "torch.cuda.device_count", "os.environ", "os.getenv")):
                return True
        return False

    def is_mode_test(self, test) -> bool:
        """A test of training/eval mode, autograd or inference mode, or compilation: the checks and the timed
        calls may run in different modes, so a PyTorch branch on it can serve only the timed ones."""
        return any((isinstance(n, ast.Attribute) and n.attr in MODE_ATTRS) or (isinstance(n, ast.Call) and (
            self.resolve(n.func) in MODE_CALLS or (isinstance(n.func, ast.Attribute) and n.func.attr == "is_inference")
        )) for n in ast.walk(test))

    def creates_stream(self, call: ast.Call) -> bool:
        """A call that makes a new stream: a stream class (torch's, or a subclass defined here), or the type of
        a stream called again (`type(torch.cuda.current_stream())()`)."""
        f = call.func
        if self.resolve(f) in STREAM_CREATORS:
            return True
        if isinstance(f, ast.Name) and f.id in self.classes:
            return any(self.resolve(b) in STREAM_CREATORS for b in self.classes[f.id].bases)
        inner = f.args[0] if isinstance(f, ast.Call) and self.resolve(f.func) == "builtins.type" and f.args else (
            f.value if isinstance(f, ast.Attribute) and f.attr == "__class__" else None)
        return isinstance(inner, ast.Call) and (self.resolve(inner.func) in STREAM_CREATORS or (
            self.resolve(inner.func) or "").endswith(("current_stream", "default_stream")))

    def is_pointer_call(self, n) -> bool:
        return isinstance(n, ast.Call) and ((isinstance(n.func, ast.Attribute) and n.func.attr == "data_ptr")
                                            or self.resolve(n.func) == "builtins.id")

    def pointer_keyed(self, node, tainted: set[str]) -> bool:
        return any(self.is_pointer_call(n) or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(node))

    def is_empty_alloc(self, node) -> bool:
        return isinstance(node, ast.Call) and (
            self.resolve(node.func) in ("torch.empty", "torch.empty_like", "torch.empty_strided")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "new_empty"))

    def env_names(self, n: ast.Call, q: str) -> set[str]:
        """The environment variables a call sets (os.putenv, os.environ.update/setdefault, operator.setitem)."""
        if q == "operator.setitem" and (not n.args or self.resolve(n.args[0]) != "os.environ"):
            return set()
        if ENV_SETTERS[q] is not None:
            at = ENV_SETTERS[q]
            return {const_str(n.args[at])} - {None} if len(n.args) > at else set()
        keys = [k for a in n.args if isinstance(a, ast.Dict) for k in a.keys]  # update({...}) and update(NAME=...)
        return {const_str(k) for k in keys} - {None} | {k.arg for k in n.keywords if k.arg}
