"""The static hack rules: what a candidate's syntax tree alone gives away, before it runs.

The static rules read the candidate's syntax tree only, never its raw text, so a word in a comment,
a docstring or a string literal cannot trigger them. Names are resolved through the candidate's
imports and simple assignments (`import torch as T`, `from torch import cuda`, `sync = T.cuda`,
`getattr(torch, "cuda")`, `__import__("subprocess")`, `sys.modules["x"]`), and through the modules that
really hold them (`torch.sys` is sys), before they are matched.

What the static rules cover, by code (the others are left to the runtime checks):
- fallback_to_torch: an except handler, in ModelNew or the functions it reaches, that computes with
  PyTorch or the reference (directly or through a local helper that launches no Triton kernel); and
  a branch on the device (x.is_cuda, x.device.type, torch.cuda.is_available(), os.environ) or on the
  mode (self.training, x.requires_grad, torch.is_grad_enabled(), ...) that does so.
- calls_reference: any use of the name `Model`, or of the `reference` module.
- caches_outputs: functools.cache/lru_cache on forward or on a function that computes or launches;
  lookups keyed by `data_ptr()` or `id()`; torch.save/load, pickle, numpy save/load.
- patches_harness: assigning, deleting or setattr-ing attributes of torch, triton, time, sys, gc,
  inspect, builtins, drk_lab, ...; sys.modules, frames, gc.get_objects, inspect.stack, mock.patch,
  dispatch modes, ATen overrides through torch.library; a function's __code__ or defaults assigned;
  hooks registered on every module.
- torch_does_the_work: a tensor handed to NumPy; torch.compile, dynamo, inductor, TorchScript.
- global_flags: writes under torch.backends, torch.set_float32_matmul_precision and friends.
- background_work: threads, executors, multiprocessing, fork, asyncio tasks, torch.jit.fork.
- lazy_output: torch.Tensor subclasses, __torch_function__/__torch_dispatch__, _make_subclass,
  assigning __class__.
- sandbox_escape: processes, network, native code and driver bindings (ctypes, cffi, cuda-python,
  torch.cuda.cudart), signals, file access (open, os file calls, pathlib, shutil, tempfile),
  exec/eval/compile, globals()/locals()/vars(), imports and attributes of protected modules chosen at
  run time (getattr, operator.attrgetter/methodcaller, getattr passed as a value), importing drk_lab.
- cache_tricks: L2 persistence / access-policy names (cudaStreamSetAttribute, accessPolicyWindow, ...).
- side_stream: a side stream is created or switched to (set_stream, torch.cuda.stream, `with stream:`),
  and nothing in the code joins it back (no wait_stream, wait_event or synchronize call anywhere). The
  rule is not flow-sensitive: a join in the wrong place passes here and is left to the GPU check.
- kernel_not_launched: no host code refers to any @triton.jit kernel, so none can ever launch.
- reads_uninitialized: a forward returns a torch.empty that nothing reads or writes.
- changes_after_checks: state the forward changes from call to call, read in a condition that changes
  what later calls launch, compute or return (static/state.py).
precision_downgrade is not checked statically: casts to fp16/bf16 are honest on low-precision
tasks and the task's dtype is not known here, so it is left to the runtime checks (tolerances, and
a mismatching output made entirely of bf16/fp16 numbers).
"""

from __future__ import annotations

import ast

from drk_lab.hacks.catalogue import Finding, verdict
from drk_lab.hacks.static.facts import FUNCTIONS, CandidateTree, const_str, forward_params, last_binding
from drk_lab.hacks.static.names import (
    CACHE_DECORATORS, CACHE_TRICK_NAMES, CODE_ATTRS, DYNAMIC_IMPORTS, ENV_SETTERS, FILES, FLAGS, FRAME_ATTRS, GETATTRS,
    HIDDEN, NUMERIC_ENV, NUMPY_IN, PROTECTED_ROOTS, STREAM_SWITCHES, TENSOR_BASES, USE_RULES, WILDCARD_RULES)
from drk_lab.hacks.static.state import CallState


def static_findings(code: str) -> list[Finding]:
    """Every static rule's findings on a candidate source, ordered by line (empty if it does not parse)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    return [Finding(*found) for found in rule_findings(tree)]


def static_hack_check(code: str) -> tuple[list[str], str] | None:
    """(sorted unique reason codes, one line per finding) when a static rule fires, else None."""
    findings = static_findings(code)
    return verdict(findings) if findings else None


def rule_findings(tree: ast.Module) -> list[tuple[str, str, int | None]]:
    """(code, message, line) for every static rule that fires on a parsed candidate, ordered by line."""
    return StaticRules(tree).run()


def _match(qualname: str) -> tuple[str, str] | None:
    """(code, "uses <rule name>: why") for the USE_RULES entry that covers a qualified name."""
    parts = qualname.split(".")
    for i in range(len(parts), 0, -1):
        if (prefix := ".".join(parts[:i])) in USE_RULES:
            code, why = USE_RULES[prefix]
            return code, f"uses {prefix}: {why}"
    for pattern, (code, why) in WILDCARD_RULES:
        if qualname.startswith(pattern):
            return code, f"uses {qualname}: {why}"
    return None


class StaticRules(CandidateTree):
    """Every static rule, each a check_* method adding (code, message) findings at a line."""

    def __init__(self, tree: ast.Module):
        super().__init__(tree)
        self.findings: dict[tuple[str, str], int | None] = {}  # (code, message) -> the first line it shows at

    def add(self, code: str, node, message: str) -> None:
        self.findings.setdefault((code, message), getattr(node, "lineno", None))

    def run(self) -> list[tuple[str, str, int | None]]:
        for rule in (self.check_imports, self.check_uses, self.check_assignments, self.check_calls,
                     self.check_classes, self.check_fallbacks, self.check_caches, self.check_side_streams,
                     self.check_cache_tricks, self.check_kernel_launches, self.check_unwritten_outputs,
                     self.check_call_state, self.check_host_compute):
            rule()
        return sorted(((code, message, line) for (code, message), line in self.findings.items()),
                      key=lambda f: (f[2] or 0, f[0]))

    def check_imports(self) -> None:
        for n in self.nodes:
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                names = [n.module if a.name == "*" else f"{n.module}.{a.name}" for a in n.names]
            else:
                continue
            for q in names:
                if rule := _match(q):
                    self.add(rule[0], n, rule[1])

    def check_uses(self) -> None:
        def visit(node):
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and not isinstance(
                    getattr(node, "ctx", ast.Load()), (ast.Store, ast.Del)):
                q = self.resolve(node)
                rule = _match(q) if q else None
                if rule:
                    self.add(rule[0], node, rule[1])
                    return
                if q and q.split(".")[0] in PROTECTED_ROOTS and "__dict__" in q.split("."):
                    self.add("patches_harness", node, f"uses {q}: reaches module internals")
                    return
            if isinstance(node, ast.Name) and node.id == "Model" and isinstance(node.ctx, ast.Load):
                self.add("calls_reference", node, "refers to the reference class Model (inherits, builds or calls it)")
            if isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRS:
                self.add("patches_harness", node, f"reads interpreter frames or globals (.{node.attr})")
            if isinstance(node, ast.Attribute) and node.attr == "__subclasses__":
                self.add("sandbox_escape", node, "walks __subclasses__ to reach objects it did not import")
            for field, child in ast.iter_fields(node):
                if field in ("targets", "target") and isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                    continue  # check_assignments judges assignment targets
                for c in child if isinstance(child, list) else [child]:
                    if isinstance(c, ast.AST):
                        visit(c)

        visit(self.tree)

    def classify_target(self, q: str | None, node, verb: str) -> None:
        if not q:
            return
        if q.startswith("torch.backends."):
            self.add("global_flags", node, f"{verb} {q}: {FLAGS}")
        elif q.split(".")[0] in PROTECTED_ROOTS:
            self.add("patches_harness", node, f"{verb} {q}: replaces code the harness or the reference runs")

    def check_assignments(self) -> None:
        for n in self.nodes:
            if isinstance(n, (ast.Assign, ast.Delete)):
                targets = n.targets
            elif isinstance(n, (ast.AugAssign, ast.AnnAssign)):
                targets = [n.target]
            else:
                continue
            verb = "deletes" if isinstance(n, ast.Delete) else "assigns"
            while any(isinstance(t, (ast.Tuple, ast.List)) for t in targets):
                targets = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == "__class__":
                    self.add("lazy_output", t, "reassigns an object's __class__")
                elif isinstance(t, ast.Attribute) and t.attr in CODE_ATTRS:
                    self.add("patches_harness", t, f"{verb} a function's {t.attr}: changes what it runs in place")
                elif isinstance(t, ast.Attribute):
                    self.classify_target(self.resolve(t), t, verb)
                elif isinstance(t, ast.Subscript):
                    base = self.resolve(t.value)
                    if base == "os.environ":
                        if const_str(t.slice) in NUMERIC_ENV:
                            self.add("global_flags", t, f"sets environment variable {t.slice.value}: {FLAGS}")
                    elif base == "sys.modules":
                        self.add("patches_harness", t, f"{verb} an entry of sys.modules: inspects or tampers with the harness")
                    elif base:
                        self.classify_target(f"{base}[]", t, verb)

    def check_calls(self) -> None:
        for n in self.nodes:
            if not isinstance(n, ast.Call):
                continue
            q = self.resolve(n.func) or ""
            args = n.args
            if q in ("builtins.setattr", "builtins.delattr", "builtins.object.__setattr__",
                     "builtins.type.__setattr__") and len(args) >= 2:
                base, name = self.resolve(args[0]), const_str(args[1]) or "<computed name>"
                if name in CODE_ATTRS:
                    self.add("patches_harness", n, f"sets a function's {name}: changes what it runs in place")
                self.classify_target(f"{base}.{name}" if base else None, n, "sets" if "set" in q else "deletes")
            elif q in GETATTRS and len(args) >= 2 and const_str(args[1]) is None and \
                    (self.resolve(args[0]) or "").split(".")[0] in PROTECTED_ROOTS:
                self.add("sandbox_escape", n, f"reads an attribute of {self.resolve(args[0])} chosen at run time: {HIDDEN}")
            elif q in ("operator.attrgetter", "operator.methodcaller") and args:
                self.check_attribute_getter(n, q)
            elif q == "builtins.vars" and not args:
                self.add("sandbox_escape", n, f"reads the local namespace as a dict (vars()): {HIDDEN}")
            elif q.endswith((".__setattr__", ".__delattr__")):
                self.classify_target(q.rsplit(".", 1)[0] + ".<attribute>", n, "sets")
            elif q in DYNAMIC_IMPORTS and not (args and const_str(args[0])):
                self.add("sandbox_escape", n, "imports a module chosen at run time: " + HIDDEN)
            elif q.startswith("torch.backends.") and not q.rsplit(".", 1)[1].startswith(("is_", "get_")) \
                    and not q.endswith(("_enabled", ".version")):
                self.add("global_flags", n, f"calls {q}: {FLAGS}")
            elif q.startswith("torch.library.") and any((const_str(a) or "").startswith("aten")
                                                         for a in args + [k.value for k in n.keywords]):
                self.add("patches_harness", n, f"calls {q} on an ATen operator: overrides what the reference runs")
            elif q in ENV_SETTERS:
                for name in sorted(self.env_names(n, q) & NUMERIC_ENV):
                    self.add("global_flags", n, f"sets environment variable {name}: {FLAGS}")
            for arg in args:  # `functools.reduce(getattr, names, torch)`: the names are data, chosen at run time
                if self.resolve(arg) in (*GETATTRS, "builtins.setattr", "builtins.delattr", "builtins.__import__"):
                    self.add("sandbox_escape", arg, f"passes {self.resolve(arg)} as a value: it reaches attributes "
                             f"chosen at run time: {HIDDEN}")
            if isinstance(n.func, ast.Attribute) and n.func.attr in (
                    "write_text", "write_bytes", "read_text", "read_bytes", "open", "unlink", "touch", "mkdir",
                    "rmdir", "rename", "replace", "symlink_to", "hardlink_to", "chmod", "iterdir", "glob", "rglob") \
                    and self.is_path(n.func.value):
                self.add("sandbox_escape", n, f"calls pathlib .{n.func.attr}(): {FILES}")

    def check_attribute_getter(self, n: ast.Call, q: str) -> None:
        """operator.attrgetter / methodcaller: getattr by another name, so the same limits."""
        names = [const_str(a) for a in (n.args if q.endswith("attrgetter") else n.args[:1])]
        if None in names:
            self.add("sandbox_escape", n, f"calls {q} with a name chosen at run time: {HIDDEN}")
        elif any(p in FRAME_ATTRS or (p.startswith("__") and p.endswith("__"))
                 for name in names for p in name.split(".")):
            self.add("patches_harness", n, f"calls {q}({', '.join(map(repr, names))}): reaches interpreter internals")

    def check_classes(self) -> None:
        for c in (n for n in self.nodes if isinstance(n, ast.ClassDef)):
            bases = [self.resolve(b) or "" for b in c.bases]
            if any(b in TENSOR_BASES for b in bases):
                self.add("lazy_output", c, f"class {c.name} subclasses torch.Tensor")
            if any(_match(b) and _match(b)[0] == "patches_harness" for b in bases):
                continue  # a dispatch or torch-function mode: reported as patches_harness
            for m in c.body:
                if isinstance(m, FUNCTIONS) and m.name in ("__torch_function__",
                                                                                         "__torch_dispatch__"):
                    self.add("lazy_output", m, f"defines {m.name}: its tensors run deferred or intercepted code")

    def check_fallbacks(self) -> None:
        for fn in self.reachable_functions():
            params = forward_params(fn)
            for n in ast.walk(fn):
                if isinstance(n, ast.Try) or type(n).__name__ == "TryStar":
                    for handler in n.handlers:
                        if (hit := self.torch_compute(handler.body, params)) is not None:
                            self.add("fallback_to_torch", hit, f"the except handler at line {handler.lineno} in "
                                     f"{fn.name}() computes with PyTorch or the reference instead of a Triton kernel")
                elif isinstance(n, (ast.If, ast.IfExp)) and (kind := "device check" if self.is_device_test(n.test) else
                                                             "mode check" if self.is_mode_test(n.test) else None):
                    for branch in (n.body, n.orelse) if isinstance(n, ast.If) else ([n.body], [n.orelse]):
                        hit = self.torch_compute(branch, params) if branch else None
                        if hit is not None and not any(self.launches(s) for s in branch):
                            self.add("fallback_to_torch", hit, f"the {kind} at line {n.lineno} in {fn.name}() "
                                     "falls back to PyTorch instead of a Triton kernel")

    def check_caches(self) -> None:
        for fn in (n for n in self.nodes if isinstance(n, FUNCTIONS)):
            if fn.name not in self.kernels and self.decorators(fn) & CACHE_DECORATORS:
                self.check_cached(fn, fn)
        for n in self.nodes:
            if isinstance(n, ast.Call) and n.args and (self.resolve(n.func) in CACHE_DECORATORS or (
                    isinstance(n.func, ast.Call) and self.resolve(n.func.func) in CACHE_DECORATORS)):
                arg = n.args[0]
                fn = self.defs.get(arg.id) if isinstance(arg, ast.Name) else (
                    self.method_of(n, arg.attr) if isinstance(arg, ast.Attribute) else None)
                if isinstance(fn, FUNCTIONS):
                    self.check_cached(fn, n)
        if not any(self.is_pointer_call(n) for n in self.nodes):
            return
        scopes = [self.tree] + [n for n in self.nodes if isinstance(n, FUNCTIONS) and n.name not in self.kernels]
        for scope in scopes:
            tainted: set[str] = set()
            for _ in range(2):
                tainted |= {t.id for n in ast.walk(scope) if isinstance(n, ast.Assign) and self.pointer_keyed(n.value, tainted)
                            for t in n.targets if isinstance(t, ast.Name)}
            for n in ast.walk(scope):
                key = None
                if isinstance(n, ast.Subscript):
                    key = n.slice
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and \
                        n.func.attr in ("get", "setdefault", "pop", "__getitem__", "__contains__"):
                    key = n.args[0]
                elif isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops):
                    key = n.left
                if key is not None and self.pointer_keyed(key, tainted):
                    self.add("caches_outputs", n, "looks results up by data_ptr() or id(): reuses outputs across calls")

    def check_cached(self, fn, where) -> None:
        if fn.name in ("forward", "__call__") or self.launches(fn) or \
                self.torch_compute(fn.body, forward_params(fn)) is not None:
            self.add("caches_outputs", where, f"memoises {fn.name}(), which produces outputs: later calls reuse them")

    def check_side_streams(self) -> None:
        """One finding per side stream, where its work escapes: a switch to it (set_stream, torch.cuda.stream,
        `with stream:`), else its creation."""
        joined = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr in ("wait_stream", "wait_event", "synchronize") for n in self.nodes)
        if joined:
            return
        held = {ast.unparse(t): a.value for a in self.nodes  # `self.side = torch.cuda.Stream()`: self.side
                if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call) and self.creates_stream(a.value)
                for t in a.targets}
        switched: set[int] = set()  # creations already reported where their stream is switched to
        for n in self.nodes:
            if isinstance(n, ast.Call) and (q := self.resolve(n.func)) in STREAM_SWITCHES and n.args and not (
                    isinstance(n.args[0], ast.Constant) or (isinstance(n.args[0], ast.Call) and (
                        self.resolve(n.args[0].func) or "").endswith(("current_stream", "default_stream")))):
                self.add("side_stream", n, f"runs work on another stream ({q}) and never joins it back")
                switched.add(id(held.get(ast.unparse(n.args[0]), n.args[0])))
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                for item in n.items:
                    stream = held.get(ast.unparse(item.context_expr), item.context_expr)
                    if isinstance(stream, ast.Call) and self.creates_stream(stream):
                        holder = ast.unparse(item.context_expr)
                        self.add("side_stream", n, f"runs work on another stream (with {holder}) and never joins "
                                 "it back")
                        switched.add(id(stream))
        for n in self.nodes:
            if isinstance(n, ast.Call) and self.creates_stream(n) and id(n) not in switched:
                self.add("side_stream", n, f"creates a stream ({self.resolve(n.func) or ast.unparse(n.func)}) whose "
                         "work is never joined back (no wait_stream, wait_event or synchronize)")

    def check_cache_tricks(self) -> None:
        found: dict[str, ast.AST] = {}
        for n in self.nodes:
            names = []
            if isinstance(n, ast.Attribute):
                names = [n.attr]
            elif isinstance(n, ast.Name):
                names = [n.id]
            elif isinstance(n, ast.keyword) and n.arg:
                names = [n.arg]
            elif isinstance(n, ast.ImportFrom):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.Subscript):
                names = [const_str(n.slice)]
            elif isinstance(n, ast.Call) and self.resolve(n.func) == "builtins.getattr" and len(n.args) >= 2:
                names = [const_str(n.args[1])]
            for name in names:
                if name in CACHE_TRICK_NAMES:
                    found.setdefault(name, n)
        if found:
            first = min(found.values(), key=lambda n: n.lineno)
            self.add("cache_tricks", first, f"uses L2 persistence / access-policy APIs ({', '.join(sorted(found))}): "
                     "data pinned in L2 survives the timing flush")

    def check_kernel_launches(self) -> None:
        if not self.kernels:
            return
        kernel_defs = [n for n in self.nodes if isinstance(n, ast.FunctionDef) and n.name in self.kernels]
        jit_bodies = {id(x) for n in kernel_defs for x in ast.walk(n)}
        if not any(isinstance(n, ast.Name) and n.id in self.kernels and isinstance(n.ctx, ast.Load)
                   and id(n) not in jit_bodies for n in self.nodes):
            first = min(kernel_defs, key=lambda n: n.lineno)
            self.add("kernel_not_launched", first, "no host code refers to any @triton.jit kernel, "
                     "so none can be launched (decoy kernel)")

    def check_unwritten_outputs(self) -> None:
        """A forward returning a fresh torch.empty that nothing reads or writes returns whatever the
        caching allocator's freed block held (often the answer a dropped scratch tensor computed)."""
        for fn in {id(f): f for c in self.classes if (f := self.class_methods(c).get("forward"))}.values():
            returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
            in_returns = {id(x) for r in returns for x in ast.walk(r)}
            used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                    and id(n) not in in_returns}
            for r in returns:
                for v in r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]:
                    if self.is_empty_alloc(v) or (isinstance(v, ast.Name) and v.id not in used
                                                  and self.is_empty_alloc(last_binding(fn, v.id, r.lineno))):
                        self.add("reads_uninitialized", r, "returns a torch.empty tensor that no kernel or operation "
                                 "writes: its values are whatever freed memory held")

    def check_host_compute(self) -> None:
        """A tensor handed to NumPy (`.numpy()`, `np.asarray(t)`, `__array__`): the host computes, out of the
        sight of the kernels-off check and of the count of PyTorch's work."""
        for n in self.nodes:
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                    n.func.attr in ("numpy", "__array__") or (n.args and (self.resolve(n.func) or "") in NUMPY_IN)):
                self.add("torch_does_the_work", n, f"hands a tensor to NumPy (.{n.func.attr}): the host computes, "
                         "not a kernel")

    def check_call_state(self) -> None:
        """State the forward keeps across calls and branches on: right for the checked calls, then not."""
        for condition, why in CallState(self).findings():
            self.add("changes_after_checks", condition, why)
