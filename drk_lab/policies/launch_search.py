"""Launch and autotune parameters of a Triton candidate, found through the AST, and their mutations.

Only integer literals that reach Triton as launch meta-parameters count; nothing that changes what a
kernel computes:

- `num_warps=` / `num_stages=` of a launch (`kernel[grid](..., num_warps=4)`) or of a `triton.Config`;
- a `tl.constexpr` argument of a launch whose kernel uses it as a tile size (a `range` step, multiplied by
  a program id or loop index, or the divisor of `tl.cdiv`), given as a literal, or as a name bound once to
  a literal in the launching function (`BLOCK = 1024`) or at module level, or as the literal leaves of
  `a if c else b` / `min(..)` / `max(..)` of those;
- the values of such parameters in `triton.Config({...})` autotune lists.

A constexpr used only as a tensor extent (`tl.arange(0, BLOCK)` with no loop over it: the block must cover
a whole row) is left alone, as is any value computed at run time (`triton.next_power_of_2(n_cols)`), any
literal that also flows into another parameter, and a tile literal whose value appears elsewhere in the same
function (`grid = (triton.cdiv(n, 1024),)` next to `BLOCK=1024`), since the two may be linked.
"""

from __future__ import annotations

import ast
import math
import random
from dataclasses import dataclass

NUM_WARPS_BOUNDS = (1, 16)
NUM_STAGES_BOUNDS = (1, 5)
DOT_TILE_BOUNDS = (16, 256)  # tl.dot needs every dimension >= 16
TILE_BOUNDS = (16, 16384)
COUNT_BOUNDS = (1, 64)  # tile parameters that are no tensor extent, e.g. GROUP_M
MAX_TILE_ELEMENTS = 1 << 16  # largest 2-D tile (two extents set by one launch or config)


@dataclass
class Site:
    label: str  # what the literal sets, for messages: "relu_kernel.BLOCK", "matmul_kernel num_warps"
    kind: str  # "num_warps", "num_stages", "tile" (a tensor extent) or "count" (a tile parameter, no extent)
    value: int
    lo: int
    hi: int
    pow2: bool
    group: int  # sites set by the same launch or config (their tile extents are multiplied together)
    start: int  # byte offsets of the literal in the source
    end: int

    def shifted(self, steps: int) -> int:
        if self.pow2:
            new = self.value << steps if steps >= 0 else self.value >> -steps
        else:
            new = self.value + steps
        return min(self.hi, max(self.lo, new))


def _attr_name(node) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _is_pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _int_const(node) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


@dataclass
class _Kernel:
    params: list[str]
    constexpr: set[str]
    tiled: set[str]
    extents: set[str]
    uses_dot: bool
    configs: list[ast.Call]


def _kernel_info(fn: ast.FunctionDef) -> _Kernel | None:
    is_jit, configs = False, []
    for dec in fn.decorator_list:
        name = _attr_name(dec.func if isinstance(dec, ast.Call) else dec)
        is_jit |= name == "jit"
        if name == "autotune" and isinstance(dec, ast.Call):
            for value in [kw.value for kw in dec.keywords if kw.arg == "configs"] + dec.args[:1]:
                configs += [n for n in ast.walk(value) if isinstance(n, ast.Call) and _attr_name(n.func) == "Config"]
    if not is_jit:
        return None
    args = fn.args.posonlyargs + fn.args.args
    constexpr = {a.arg for a in args if a.annotation is not None and _attr_name(a.annotation) == "constexpr"}
    tiled, extents, uses_dot = set(), set(), False
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            name = _attr_name(node.func)
            uses_dot |= name == "dot"
            if name in ("range", "static_range") and len(node.args) == 3 and isinstance(node.args[2], ast.Name):
                tiled.add(node.args[2].id)
            if name == "cdiv" and len(node.args) == 2 and isinstance(node.args[1], ast.Name):
                tiled.add(node.args[1].id)
            if name == "arange":
                extents |= {n.id for a in node.args for n in ast.walk(a) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for one, other in ((node.left, node.right), (node.right, node.left)):
                if isinstance(one, ast.Name) and not isinstance(other, ast.Constant):
                    tiled.add(one.id)
        elif isinstance(node, (ast.List, ast.Tuple)):
            extents |= {e.id for e in node.elts if isinstance(e, ast.Name)}
    return _Kernel([a.arg for a in args], constexpr, tiled & constexpr, extents & constexpr, uses_dot, configs)


class _Finder:
    """Walks one source for the literal integers that only reach launch meta-parameters."""

    def __init__(self, source: str):
        self.source = source
        self.tree = ast.parse(source)
        self.parent = {child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)}
        self.kernels = {n.name: k for n in self.tree.body if isinstance(n, ast.FunctionDef)
                        for k in [_kernel_info(n)] if k is not None}
        self.kernel_nodes = {n for n in self.tree.body if isinstance(n, ast.FunctionDef) and n.name in self.kernels}
        self.scope_names: dict = {}
        self.global_names = {name for n in ast.walk(self.tree) if isinstance(n, ast.Global) for name in n.names}
        self.found: dict[ast.Constant, tuple[str, str, int, bool, bool]] = {}  # node -> label, kind, group, dot, veto
        offsets = [0]
        for line in source.encode().split(b"\n"):
            offsets.append(offsets[-1] + len(line) + 1)
        self.line_offsets = offsets

    def scope_of(self, node):
        node = self.parent.get(node)
        while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            node = self.parent.get(node)
        return node if node is not None else self.tree

    def _own_nodes(self, scope):
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            yield node
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                                     ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                stack.extend(ast.iter_child_nodes(node))

    def names_of(self, scope) -> tuple[dict[str, list[ast.Name]], set[str]]:
        """Names stored in a scope (not in nested ones) and names declared there by global/nonlocal/import."""
        if scope not in self.scope_names:
            stores: dict[str, list[ast.Name]] = {}
            declared: set[str] = set()
            for n in self._own_nodes(scope):
                if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                    stores.setdefault(n.id, []).append(n)
                elif isinstance(n, (ast.Global, ast.Nonlocal)):
                    declared |= set(n.names)
                elif isinstance(n, (ast.Import, ast.ImportFrom)):
                    declared |= {a.asname or a.name for a in n.names}
            if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = scope.args
                declared |= {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
            self.scope_names[scope] = (stores, declared)
        return self.scope_names[scope]

    def binding(self, name: str, scope):
        """The value expression of the single plain `name = value` binding visible from scope, else None."""
        while True:
            stores, declared = self.names_of(scope)
            stores = stores.get(name, [])
            if name in declared or len(stores) > 1:
                return None
            if len(stores) == 1:
                holder = self.parent[stores[0]]
                if isinstance(holder, ast.Assign) and holder.targets == [stores[0]]:
                    return holder.value
                if isinstance(holder, ast.AnnAssign) and holder.value is not None:
                    return holder.value
                return None
            if scope is self.tree:
                return None
            scope = self.scope_of(scope)
            if scope is self.tree and name in self.global_names:
                return None

    def leaves(self, expr, scope, depth: int = 0) -> list[ast.Constant]:
        if depth > 4 or expr is None:
            return []
        if _int_const(expr):
            return [expr]
        if isinstance(expr, ast.IfExp):
            return self.leaves(expr.body, scope, depth + 1) + self.leaves(expr.orelse, scope, depth + 1)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("min", "max"):
            return [leaf for a in expr.args for leaf in self.leaves(a, scope, depth + 1)]
        if isinstance(expr, ast.Name):
            value = self.binding(expr.id, scope)
            return self.leaves(value, self.scope_of(value), depth + 1) if value is not None else []
        return []

    def flow(self, expr, scope, label: str, kind: str | None, group: int, dot: bool) -> None:
        """Literals of expr reach a meta-parameter of `kind` (None: a parameter they must not change)."""
        for leaf in self.leaves(expr, scope):
            if kind is None or (leaf in self.found and self.found[leaf][1] != kind):
                self.found[leaf] = (label, kind or "", group, dot, True)
            elif leaf not in self.found:
                self.found[leaf] = (label, kind, group, dot, False)
            elif dot and not self.found[leaf][3]:
                self.found[leaf] = self.found[leaf][:3] + (True, False)

    def tile_kind(self, kernels: list[_Kernel], param: str) -> str | None:
        if not kernels or any(param not in k.tiled for k in kernels):
            return None
        return "tile" if any(param in k.extents for k in kernels) else "count"

    def run(self) -> list[Site]:
        group = 0
        for call in ast.walk(self.tree):
            if not isinstance(call, ast.Call):
                continue
            if isinstance(call.func, ast.Subscript) and _attr_name(call.func.value) in self.kernels:
                name = _attr_name(call.func.value)
                kernel, scope, group = self.kernels[name], self.scope_of(call), group + 1
                for i, arg in enumerate(call.args):
                    starred = any(isinstance(a, ast.Starred) for a in call.args[: i + 1])
                    param = None if starred or i >= len(kernel.params) else kernel.params[i]
                    kind = self.tile_kind([kernel], param) if param else None
                    self.flow(arg, scope, f"{name}.{param}", kind, group, kernel.uses_dot)
                for kw in call.keywords:
                    if kw.arg in ("num_warps", "num_stages"):
                        self.flow(kw.value, scope, f"{name} {kw.arg}", kw.arg, group, False)
                    else:
                        kind = self.tile_kind([kernel], kw.arg) if kw.arg else None
                        self.flow(kw.value, scope, f"{name}.{kw.arg}", kind, group, kernel.uses_dot)
            elif _attr_name(call.func) == "Config":
                group += 1
                self.config_sites(call, group)
        return self.sites()

    def config_sites(self, call: ast.Call, group: int) -> None:
        owners = [(n, k) for n, k in self.kernels.items() if call in k.configs]
        values = call.args[:1] + [kw.value for kw in call.keywords if kw.arg == "kwargs"]
        for meta in values:
            if not isinstance(meta, ast.Dict):
                continue
            for key, value in zip(meta.keys, meta.values):
                if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and _int_const(value)):
                    continue
                kernels = [k for _, k in owners] or [k for k in self.kernels.values() if key.value in k.params]
                names = "/".join(n for n, _ in owners) or "config"
                self.flow(value, self.tree, f"{names} config {key.value}", self.tile_kind(kernels, key.value),
                          group, any(k.uses_dot for k in kernels))
        for kw in call.keywords:
            if kw.arg in ("num_warps", "num_stages"):
                self.flow(kw.value, self.tree, f"config {kw.arg}", kw.arg, group, False)

    def offset(self, lineno: int, col: int) -> int:
        return self.line_offsets[lineno - 1] + col

    def tied(self, leaf: ast.Constant, sites: set) -> bool:
        """The value also appears as another literal in the same function (the module, for a module constant)."""
        scope = self.scope_of(leaf)
        if scope not in self.scope_ints:
            skip = {n for k in self.kernel_nodes for n in ast.walk(k)} if scope is self.tree else set()
            self.scope_ints[scope] = [n for n in ast.walk(scope) if _int_const(n) and n not in skip]
        return any(n.value == leaf.value and n is not leaf and n not in sites for n in self.scope_ints[scope])

    def sites(self) -> list[Site]:
        out, self.scope_ints = [], {}
        sites = {n for n, entry in self.found.items() if not entry[4]}
        for leaf, (label, kind, group, dot, veto) in self.found.items():
            v = leaf.value
            if veto or v <= 0:
                continue
            if kind == "num_warps":
                bounds, pow2 = NUM_WARPS_BOUNDS, True
            elif kind == "num_stages":
                bounds, pow2 = NUM_STAGES_BOUNDS, False
            elif kind == "tile":
                bounds, pow2 = (DOT_TILE_BOUNDS if dot else TILE_BOUNDS), True
            else:
                bounds, pow2 = COUNT_BOUNDS, _is_pow2(v)
            if (pow2 and not _is_pow2(v)) or (kind in ("tile", "count") and self.tied(leaf, sites)):
                continue
            out.append(Site(label, kind, v, min(bounds[0], v), max(bounds[1], v), pow2, group,
                            self.offset(leaf.lineno, leaf.col_offset), self.offset(leaf.end_lineno, leaf.end_col_offset)))
        return sorted(out, key=lambda s: s.start)


def tunable_parameters(code: str) -> list[Site]:
    """The literal launch/autotune parameters of a source that can change without changing its results."""
    try:
        return _Finder(code).run()
    except (SyntaxError, ValueError, RecursionError):
        return []


def apply_values(code: str, sites: list[Site], values: list[int]) -> str:
    data = code.encode()
    for site, value in sorted(zip(sites, values), key=lambda sv: -sv[0].start):
        data = data[: site.start] + str(value).encode() + data[site.end:]
    return data.decode()


def _fits(sites: list[Site], values: list[int]) -> bool:
    """No 2-D tile of one launch or config (any two of its literal extents) holds more than MAX_TILE_ELEMENTS."""
    per_group: dict[int, list[int]] = {}
    for site, value in zip(sites, values):
        if site.kind == "tile":
            per_group.setdefault(site.group, []).append(value)
    return all(math.prod(sorted(extents)[-2:]) <= MAX_TILE_ELEMENTS for extents in per_group.values())


def mutate(code: str, rng: random.Random, temperature: float = 1.0, sites: list[Site] | None = None):
    """(new code, [(label, old, new), ...]) with at least one parameter changed, or None when the source has
    none. Temperature 0 changes one parameter by one step (x2 or /2; +-1 for num_stages); higher
    temperatures change more parameters (each other one with probability 1 - exp(-T/2)) by more steps."""
    sites = tunable_parameters(code) if sites is None else sites
    if not sites:
        return None
    for _ in range(20):
        others = [s for s in sites]
        first = others.pop(rng.randrange(len(others)))
        extra = 1.0 - math.exp(-temperature / 2) if temperature > 0 else 0.0
        chosen = [first] + [s for s in others if rng.random() < extra]
        values = [s.value for s in sites]
        changes = []
        for site in chosen:
            steps = 1 + (min(5, int(rng.expovariate(1.0 / temperature))) if temperature > 0 else 0)
            direction = rng.choice((-1, 1))
            new = site.shifted(direction * steps)
            if new == site.value:
                new = site.shifted(-direction * steps)
            if new != site.value:
                values[sites.index(site)] = new
                changes.append((site.label, site.value, new))
        if changes and _fits(sites, values):
            return apply_values(code, sites, values), changes
    return None


def neighbours(code: str, sites: list[Site]) -> list[tuple[str, list]]:
    """Every source one step away from code: one parameter doubled or halved (num_stages: +-1)."""
    out = []
    for i, site in enumerate(sites):
        for new in sorted({site.shifted(-1), site.shifted(1)} - {site.value}):
            values = [s.value for s in sites]
            values[i] = new
            if _fits(sites, values):
                out.append((apply_values(code, sites, values), [(site.label, site.value, new)]))
    return out


