"""State a forward keeps across calls and branches on (changes_after_checks): counters, flags and caches on
`self`, on its class or in module globals that the forward (or what it calls) writes, read in a condition
that decides what a call launches, computes or returns. That is how a candidate stays right for the first
calls, which the correctness checks make, and then does something else while it is timed.

Left alone, because they are honest or belong to another code:
- lazy initialisation: a branch that only fills in state or the names its condition tests (a buffer, a
  workspace, a compiled kernel, a grid or a tuned config) and then falls through to the same launch, and
  state that only such branches write (it is set once and stays so) when the condition comes after them;
- a counter compared with a number whose branches only log or reset it, and branches that raise;
- state the forward returns (an output cache): caches_outputs, launch_reuse and the runtime checks.
"""

from __future__ import annotations

import ast

from drk_lab.hacks.static.facts import FUNCTIONS, CandidateTree, forward_params

MUTATORS = frozenset("append appendleft extend insert update setdefault pop popitem clear remove discard "
                     "__setitem__".split())
# calls that change no answer (unless an argument writes in place, which is_quiet refuses)
QUIET_CALLS = ("builtins.print", "logging.", "warnings.", "torch.cuda.", "torch.testing.")


def is_number(node) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def raises(stmts: list) -> bool:
    return any(isinstance(s, ast.Raise) for s in stmts)


def returns(stmts: list) -> bool:
    return any(isinstance(s, ast.Return) for s in stmts)


class CallState:
    """Which state ModelNew's forward writes, and the conditions on it that change what later calls do."""

    def __init__(self, facts: CandidateTree):
        self.facts = facts
        self.functions = self.forward_functions()
        self.parents = {id(c): p for fn in self.functions for p in ast.walk(fn) for c in ast.iter_child_nodes(p)}
        self.module_names = {t.id for n in facts.tree.body if isinstance(n, (ast.Assign, ast.AnnAssign)) for t in
                             (n.targets if isinstance(n, ast.Assign) else [n.target]) if isinstance(t, ast.Name)}
        self.declared = {id(fn): {x for n in ast.walk(fn) if isinstance(n, (ast.Global, ast.Nonlocal))
                                  for x in n.names} for fn in self.functions}
        self.local_names = {id(fn): {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(
            n.ctx, ast.Store)} | {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)} for fn in self.functions}
        self.writes: dict[str, list[tuple[ast.AST, str]]] = {}  # key -> (node, "count" | "set" | "once")
        for fn in self.functions:
            self.collect_writes(fn)
        self.taint: dict[int, dict[str, set[str]]] = {}
        for fn in self.functions:
            self.taint[id(fn)] = self.local_taint(fn)
        self.kernel_refs = self.kernel_aliases()
        self.guards = [(fn, n, self.reads(n.test, fn)) for fn in self.functions for n in ast.walk(fn)
                       if isinstance(n, ast.If) and self.is_init_guard(n, fn)]
        self.outputs = {self.key(v, fn) for fn, v, _ in self.returned(self.functions[:1])} | {
            direct.get(v.id) for _, v, direct in self.returned(self.functions[:1]) if isinstance(v, ast.Name)}
        self._effects: dict[int, tuple[frozenset, bool]] = {}

    # ----- what the forward reaches, and where state lives -----

    def forward_functions(self) -> list:
        """ModelNew's forward (and __call__) and the local functions and methods they reach."""
        todo = [m for name in ("forward", "__call__") if (m := self.facts.methods.get(name))]
        seen = {id(f): f for f in todo}
        while todo:
            for n in ast.walk(todo.pop()):
                callee = self.facts.local_callee(n) if isinstance(n, ast.Call) else (
                    self.facts.defs.get(n.id) if isinstance(n, ast.Name) else None)
                if isinstance(callee, FUNCTIONS) and callee.name not in self.facts.kernels and id(callee) not in seen:
                    seen[id(callee)] = callee
                    todo.append(callee)
        return list(seen.values())

    def owner(self, node) -> str | None:
        """"self" for the module and its class (self, type(self), self.__class__, ModelNew), another local
        class's name for that class, else None."""
        if isinstance(node, ast.Name):
            return "self" if node.id in ("self", "ModelNew") else node.id if node.id in self.facts.classes else None
        if isinstance(node, ast.Call) and self.facts.resolve(node.func) == "builtins.type" and node.args:
            return self.owner(node.args[0])
        if isinstance(node, ast.Attribute) and node.attr == "__class__":
            return self.owner(node.value)
        return None

    def key(self, node, fn) -> str | None:
        """The state an expression lives in: "self.<attr>" (or "<Class>.<attr>"), a module global's name, or
        None for a local value. `self.cache[k].shape` lives in self.cache."""
        while True:
            if isinstance(node, ast.Attribute) and (owner := self.owner(node.value)):
                return f"{owner}.{node.attr}"
            if isinstance(node, ast.Call) and len(node.args) >= 2 and isinstance(name := node.args[1], ast.Constant) \
                    and self.facts.resolve(node.func) in ("builtins.getattr", "builtins.hasattr") and \
                    (owner := self.owner(node.args[0])):
                return f"{owner}.{name.value}"
            if isinstance(node, ast.Name):
                return node.id if self.is_global(node.id, fn) else None
            if not isinstance(node, (ast.Attribute, ast.Subscript)):
                return None
            node = node.value

    def is_global(self, name: str, fn) -> bool:
        if name in self.declared.get(id(fn), ()):
            return True
        mutable_default = any(a.arg == name for a, d in zip(fn.args.args[::-1], fn.args.defaults[::-1])
                              if isinstance(d, (ast.Dict, ast.List, ast.Set)))
        return mutable_default or (name in self.module_names and name not in self.local_names.get(id(fn), ()))

    def collect_writes(self, fn) -> None:
        """Every write to state in `fn`: "count" when the new value comes from the old one (`+= 1`, next()),
        "once" for setdefault, else "set"."""
        def record(key, node, counts: bool = False, once: bool = False):
            self.writes.setdefault(key, []).append((node, "count" if counts else "once" if once else "set"))

        for n in ast.walk(fn):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]
                for t in (e for x in targets for e in (x.elts if isinstance(x, (ast.Tuple, ast.List)) else [x])):
                    if k := self.key(t, fn):
                        value = getattr(n, "value", None)
                        record(k, n, isinstance(n, ast.AugAssign) or (
                            value is not None and k in self.reads(value, fn, direct=True)))
            elif isinstance(n, ast.Call):
                f, q = n.func, self.facts.resolve(n.func)
                if isinstance(f, ast.Attribute) and f.attr in MUTATORS and (k := self.key(f.value, fn)):
                    record(k, n, once=f.attr == "setdefault")
                elif q == "builtins.next" and n.args and (k := self.key(n.args[0], fn)):
                    record(k, n, counts=True)
                elif q == "builtins.setattr" and len(n.args) == 3 and (k := self.key(ast.Attribute(
                        value=n.args[0], attr=getattr(n.args[1], "value", "?")), fn)):
                    record(k, n, k in self.reads(n.args[2], fn, direct=True))

    def reads(self, expr, fn, direct: bool = False, depth: int = 0) -> set[str]:
        """The written state an expression reads: directly, or (unless `direct`) through local names and
        what the local functions it calls return (`if tick() > 10:`)."""
        found = set()
        for n in ast.walk(expr):
            if isinstance(n, (ast.Attribute, ast.Subscript, ast.Name, ast.Call)) and (k := self.key(n, fn)):
                found.add(k)
            if direct:
                continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                found |= self.taint.get(id(fn), {}).get(n.id, set())
            elif isinstance(n, ast.Call) and depth < 2 and id(callee := self.facts.local_callee(n)) in self.declared:
                found |= {k for r in ast.walk(callee) if isinstance(r, ast.Return) and r.value is not None
                          for k in self.reads(r.value, callee, depth=depth + 1)}
        return found if direct else found & set(self.writes)

    def local_taint(self, fn) -> dict[str, set[str]]:
        """Local names that hold values read from state (`n = self.calls`, `cfg = self.cfgs.get(key)`)."""
        taint: dict[str, set[str]] = {}
        self.taint[id(fn)] = taint  # filled in place: a second pass follows names through names
        for _ in range(2):
            for n in ast.walk(fn):
                if isinstance(n, ast.Assign) and (keys := self.reads(n.value, fn)):
                    for t in n.targets:
                        if isinstance(t, ast.Name) and not self.is_global(t.id, fn):
                            taint.setdefault(t.id, set()).update(keys)
        return taint

    def kernel_aliases(self) -> dict[str, set[str]]:
        """Names and attributes bound to a kernel or a compiled form of it (`self.compiled = k.warmup(...)`),
        named in the value itself (a tensor a launching helper returns is no kernel)."""
        refs: dict[str, set[str]] = {}
        for _ in range(2):
            for n in self.facts.nodes:
                if isinstance(n, ast.Assign) and (kernels := self.kernels_in([n.value], refs, follow=False)):
                    for t in n.targets:
                        refs.setdefault(ast.unparse(t), set()).update(kernels)
        return refs

    # ----- what a path runs -----

    def kernels_in(self, nodes: list, refs: dict, depth: int = 0, follow: bool = True) -> set[str]:
        """The kernels some code names, through kernel aliases and (if `follow`) the local functions it calls."""
        found = set()
        for n in (x for node in nodes for x in ast.walk(node)):
            if isinstance(n, ast.Name) and n.id in self.facts.kernels:
                found.add(n.id)
            elif isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n) in refs:
                found |= refs[ast.unparse(n)]
            elif isinstance(n, ast.Call) and follow and depth < 4 and (callee := self.facts.local_callee(n)):
                found |= self.kernels_in(callee.body, refs, depth + 1)
        return found

    def effect(self, nodes: list, fn) -> tuple[frozenset, bool]:
        """(the kernels a piece of code launches, whether it computes with PyTorch), cached per node."""
        kernels, computes = frozenset(), False
        for node in nodes:
            if id(node) not in self._effects:
                self._effects[id(node)] = (frozenset(self.kernels_in([node], self.kernel_refs)),
                                           self.facts.torch_compute([node], forward_params(fn)) is not None)
            kernels, computes = kernels | self._effects[id(node)][0], computes or self._effects[id(node)][1]
        return kernels, computes

    def rest_after(self, node, fn) -> list:
        """The statements that run after `node` on the way out of its function (loops not repeated)."""
        rest = []
        while node is not fn and not isinstance(node, FUNCTIONS) and id(node) in self.parents:
            parent = self.parents[id(node)]
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(parent, field, None)
                at = next((i for i, s in enumerate(block) if s is node), None) if isinstance(block, list) else None
                rest += block[at + 1:] if at is not None else []
            node = parent
        return rest

    def path_effect(self, branch: list, rest: list, fn):
        kernels, computes = self.effect(branch, fn)
        if not returns(branch):
            more = self.effect(rest, fn)
            kernels, computes = kernels | more[0], computes or more[1]
        return kernels, computes

    # ----- honest patterns -----

    def init_only(self, stmts: list, tested: set[str], fn, depth: int = 0) -> bool:
        """Statements that only fill in state or the names a condition tests, log, or call helpers that do."""
        for s in stmts:
            if isinstance(s, (ast.Pass, ast.Assert)) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)):
                continue
            if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                if all((isinstance(t, ast.Name) and t.id in tested) or self.key(t, fn) for t in targets):
                    continue
            elif isinstance(s, (ast.If, ast.For, ast.While)):
                loop = {t.id for t in ast.walk(s.target) if isinstance(t, ast.Name)} if isinstance(
                    s, ast.For) else set()
                if self.init_only(s.body + s.orelse, tested | loop, fn, depth):
                    continue
            elif isinstance(s, ast.Expr) and isinstance(call := s.value, ast.Call):
                f = call.func
                callee = self.facts.local_callee(call)
                if self.is_quiet(call) or (isinstance(f, ast.Attribute) and f.attr in MUTATORS and (
                        self.key(f.value, fn) or ast.unparse(f.value) in tested)) or (
                        callee is not None and depth < 3 and self.init_only(callee.body, set(), callee, depth + 1)):
                    continue
            return False
        return True

    def tested(self, test, fn) -> set[str]:
        """The state a condition reads and the local names in it that hold state (`cfg` of `cfg is None`)."""
        taint = self.taint.get(id(fn), {})
        return self.reads(test, fn) | {x.id for x in ast.walk(test) if isinstance(x, ast.Name) and x.id in taint}

    def written(self, stmts: list, fn, depth: int = 0) -> set[str]:
        """The state and local names some statement writes, here or in a local function it calls."""
        found = set()
        for n in (x for s in stmts for x in ast.walk(s)):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                found.add(n.id)
            if isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store) and self.key(n, fn):
                found.add(self.key(n, fn))
            if isinstance(n, ast.Call):
                if isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS and (k := self.key(n.func.value, fn)):
                    found.add(k)
                if depth < 3 and (callee := self.facts.local_callee(n)) is not None:
                    found |= self.written(callee.body, callee, depth + 1)
        return found

    def is_init_guard(self, n: ast.If, fn) -> bool:
        """`if self.buf is None: self.buf = ...`: fills in (some of) what it tests and does nothing else, and
        not after a number of calls (`if self.mode is None and self.calls > 8:` sets a mode late)."""
        tested = self.tested(n.test, fn)
        return bool(tested & self.written(n.body + n.orelse, fn)) and self.init_only(n.body, tested, fn) and \
            self.init_only(n.orelse, tested, fn) and not self.counts(n.test, self.reads(n.test, fn), fn)

    def set_once(self, key: str, fn, line: int) -> bool:
        """State that only lazy-initialisation branches testing it write (or setdefault): it holds the same
        value from its first write on, if that write comes before `line` in the same function."""
        mine = [(f, g) for f, g, tested in self.guards if key in tested]
        inside = {id(x) for _, g in mine for x in ast.walk(g)}
        if not all(kind == "once" or (kind == "set" and id(w) in inside) for w, kind in self.writes[key]):
            return False
        return all(g.lineno < line for f, g in mine if f is fn)

    def returned(self, fns: list, depth: int = 0):
        """(function, value, {local name: the state it is bound straight from}) for what `fns` return."""
        for fn in fns:
            direct = {t.id: self.key(n.value, fn) for n in ast.walk(fn) if isinstance(n, ast.Assign)
                      for t in n.targets if isinstance(t, ast.Name)}
            for r in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
                for v in r.value.elts if isinstance(r.value, ast.Tuple) else [r.value]:
                    yield fn, v, direct
                    if isinstance(v, ast.Call) and depth < 2 and (callee := self.facts.local_callee(v)) is not None:
                        yield from self.returned([callee], depth + 1)

    def bookkeeping(self, stmts: list, counters: set[str], fn) -> bool:
        """Statements that log, or reset or count the counters: nothing a later call could compute with."""
        for s in stmts:
            if isinstance(s, ast.If) and self.bookkeeping(s.body + s.orelse, counters, fn):
                continue
            if isinstance(s, (ast.Assign, ast.AugAssign)) and all(
                    self.key(t, fn) in counters for t in (s.targets if isinstance(s, ast.Assign) else [s.target])):
                continue
            if not (isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and (isinstance(s.value, ast.Constant) or (
                    self.is_quiet(s.value))))):
                return False
        return True

    def is_quiet(self, call) -> bool:
        """A logging, checking or CUDA-housekeeping call whose arguments write nothing in place."""
        return isinstance(call, ast.Call) and (self.facts.resolve(call.func) or "").startswith(QUIET_CALLS) and not any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.endswith("_")
            and not n.func.attr.startswith("_") for n in ast.walk(call))

    # ----- the rule -----

    def changing(self, test, fn) -> set[str]:
        """The state a condition reads that changes from call to call and is no output cache (self.outputs:
        what the forward returns, itself or through a local function: `return self.cache[k]`)."""
        return {k for k in self.reads(test, fn) if k not in self.outputs and not self.set_once(k, fn, test.lineno)}

    def counts(self, test, keys: set[str], fn) -> set[str]:
        """The counters among `keys` that `test` compares with a number (`self.calls > 8`, `n % 100 == 0`)."""
        counters = {k for k in keys if any(kind == "count" for _, kind in self.writes[k])}
        found = set()
        for c in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
            sides = [c.left, *c.comparators]
            if any(is_number(s) or (isinstance(s, ast.BinOp) and is_number(s.right)) for s in sides):
                found |= counters & {k for s in sides for k in self.reads(s, fn)}
        return found

    def findings(self) -> list[tuple[ast.AST, str]]:
        """(the condition, why) for every condition on changing state that changes what a call does."""
        found = []
        for fn in self.functions:
            in_tests = {id(x) for n in ast.walk(fn) if isinstance(n, (ast.If, ast.While, ast.IfExp))
                        for x in ast.walk(n.test)}
            for n in ast.walk(fn):
                # an and/or outside a test branches too: its last operands run only on some calls
                test = n.test if isinstance(n, (ast.If, ast.While, ast.IfExp)) else (
                    ast.BoolOp(op=n.op, values=n.values[:-1], lineno=n.lineno)
                    if isinstance(n, ast.BoolOp) and id(n) not in in_tests else None)
                keys = self.changing(test, fn) if test is not None else set()
                if keys and (why := self.judge(n, test, keys, fn)):
                    where = min(w.lineno for k in keys for w, _ in self.writes[k])
                    found.append((n, (f"{fn.name}() branches on {', '.join(sorted(keys))}, which it changes from "
                                      f"call to call (line {where}): {why}")))
        return found

    def judge(self, n, test, keys: set[str], fn) -> str | None:
        """Why a condition on changing state changes what a call does, or None when it does not."""
        counters = self.counts(test, keys, fn)
        if isinstance(n, ast.BoolOp):  # `self.cached or launch(x)`: the later operands run on some calls only
            return "later operands run on some calls only" if self.effect(n.values[1:], fn) != (frozenset(), False) \
                else None
        if isinstance(n, ast.IfExp):
            if counters or self.effect([n.body], fn) != self.effect([n.orelse], fn):
                return "later calls compute a different value"
            return None
        branches = [n.body, [] if isinstance(n, ast.While) else n.orelse]
        if any(raises(b) for b in branches) or (isinstance(n, ast.If) and self.is_init_guard(n, fn)):
            return None
        if counters and not all(self.bookkeeping(b, counters, fn) for b in branches):
            return "after a number of calls the forward runs other code"
        rest = self.rest_after(n, fn)
        if self.path_effect(branches[0], rest, fn) != self.path_effect(branches[1], rest, fn):
            return "its paths launch or compute different things, so later calls need not match the checked ones"
        return None
