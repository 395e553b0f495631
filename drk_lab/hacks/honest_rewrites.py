"""Honest rewrites for the hack generator (generator.py): semantics-preserving changes to an honest
candidate that make it look unusual but keep it fair, to measure the checks' false positives.

    code = rewrite(base_code, ["rename", "autotune"], rng, has_params=True)

Each rewrite takes the parsed module and returns whether it applied. None adds PyTorch compute to the
answer: around the kernels there are only views, reshapes, casts, allocations and copies made by Triton.
"""

from __future__ import annotations

import ast
import random

from drk_lab.hacks.obfuscation import Renamer, new_name

COPY_KERNEL = '''
@triton.jit
def {k}(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def {f}(src):
    src = src.contiguous()
    dst = torch.empty_like(src)
    {k}[(triton.cdiv(src.numel(), 256),)](src, dst, src.numel(), BLOCK=256)
    return dst
'''


def _parse(src: str) -> list[ast.stmt]:
    return ast.parse(src).body


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any("jit" in ast.unparse(d) for d in fn.decorator_list)


class Module:
    """The honest module being rewritten, and what the rewrites need to know about it."""

    def __init__(self, code: str, rng: random.Random, has_params: bool):
        self.tree, self.rng, self.has_params = ast.parse(code), rng, has_params
        self.taken = {n.name for n in ast.walk(self.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        self.model = next(n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")

    @property
    def forward(self) -> ast.FunctionDef:
        return next(m for m in self.model.body if isinstance(m, ast.FunctionDef) and m.name == "forward")

    def kernels(self) -> list[ast.FunctionDef]:
        return [n for n in self.tree.body if isinstance(n, ast.FunctionDef) and _is_jit(n)]

    def name(self) -> str:
        return new_name(self.rng, self.taken)

    def params(self) -> list[str]:
        return [a.arg for a in self.forward.args.args[1:]]

    def wrap_forward(self, before: str, call_result: str, after: str) -> None:
        """forward becomes a method `core` (the honest one) called between `before` and `after` lines;
        `call_result` is the name the honest result is bound to."""
        core, args = self.name(), ", ".join(self.params())
        self.forward.name = core
        src = f"def forward(self, {args}):\n"
        src += "".join(f"    {x}\n" for x in before.splitlines() if x)
        src += f"    {call_result} = self.{core}({args})\n"
        src += "".join(f"    {x}\n" for x in after.splitlines())
        self.model.body.append(_parse(src)[0])

    def code(self) -> str:
        return ast.unparse(ast.fix_missing_locations(self.tree)) + "\n"


def rename(m: Module) -> bool:
    """Kernels, helper functions and helper methods under new names."""
    names = {n.name: m.name() for n in m.tree.body if isinstance(n, ast.FunctionDef)}
    methods = {f.name: m.name() for f in m.model.body if isinstance(f, ast.FunctionDef)
               and not (f.name.startswith("__") or f.name == "forward")}
    Renamer(names, methods).visit(m.tree)
    return bool(names)


def _self_to(body: list[ast.stmt], new: str) -> None:
    for n in (x for s in body for x in ast.walk(s)):
        if isinstance(n, ast.Name) and n.id == "self":
            n.id = new


def _uses_super(fn) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "super" for n in ast.walk(fn))


def helper_function(m: Module) -> bool:
    """forward's body moved to a module-level function of the module and the inputs."""
    fwd = m.forward
    if _uses_super(fwd):
        return False
    name, args = m.name(), m.params()
    fn = _parse(f"def {name}(module, {', '.join(args)}):\n    pass")[0]
    fn.body = fwd.body
    _self_to(fn.body, "module")
    m.tree.body.insert(m.tree.body.index(m.model), fn)
    fwd.body = _parse(f"return {name}(self, {', '.join(args)})")
    return True


def launcher_class(m: Module) -> bool:
    """forward's body moved into a launcher object's __call__."""
    fwd = m.forward
    if _uses_super(fwd):
        return False
    cls, inst, args = m.name().lstrip("_").title().replace("_", ""), m.name(), m.params()
    src = f"class {cls}:\n    def __call__(self, module, {', '.join(args)}):\n        pass\n\n\n{inst} = {cls}()"
    cls_def, assign = _parse(src)
    cls_def.body[0].body = fwd.body
    _self_to(cls_def.body[0].body, "module")
    at = m.tree.body.index(m.model)
    m.tree.body[at:at] = [cls_def, assign]
    fwd.body = _parse(f"return {inst}(self, {', '.join(args)})")
    return True


def views(m: Module) -> bool:
    """Legitimate views and reshapes around the kernels: inputs viewed at their own shape (or made
    contiguous), the output reshaped to its own shape."""
    before = "\n".join(f"{p} = {p}.{m.rng.choice(('view', 'reshape'))}({p}.shape)" if m.rng.random() < 0.5
                       else f"{p} = {p}.contiguous()" for p in m.params())
    after = m.rng.choice(("return out.reshape(out.shape)", "return out.view_as(out)",
                          "return out.view(*out.shape)" if m.rng.random() < 0.5 else "return out[...]"))
    m.wrap_forward(before, "out", after)
    return True


def params_lookup(m: Module) -> bool:
    """Weights read through the module's own lookup: self.get_submodule('linear').weight."""
    changed = False
    for n in ast.walk(m.model):
        if isinstance(n, ast.Attribute) and n.attr in ("weight", "bias") and isinstance(n.value, ast.Attribute) \
                and isinstance(n.value.value, ast.Name) and n.value.value.id == "self" and isinstance(n.ctx, ast.Load):
            n.value = _parse(f"self.get_submodule({n.value.attr!r})")[0].value
            changed = True
    return changed


def alloc_style(m: Module) -> bool:
    """torch.empty_like(a) -> torch.empty(a.shape, ...) anywhere; in forward, torch.empty(size, dtype=...)
    -> x.new_empty(size, dtype=...)."""
    in_forward = {id(n) for n in ast.walk(m.forward)}
    changed = False
    for n in ast.walk(m.tree):
        f = ast.unparse(n.func) if isinstance(n, ast.Call) else ""
        if f == "torch.empty_like" and len(n.args) == 1 and not n.keywords:
            a = ast.unparse(n.args[0])
            new = _parse(f"torch.empty({a}.shape, dtype={a}.dtype, device={a}.device)")[0].value
        elif f == "torch.empty" and id(n) in in_forward and len(n.args) == 1 and "dtype" in {k.arg for k in n.keywords}:
            new = _parse(f"{m.params()[0]}.new_empty({ast.unparse(n.args[0])})")[0].value
            new.keywords = n.keywords
        else:
            continue
        n.func, n.args, n.keywords = new.func, new.args, new.keywords
        changed = True
    return changed


def _launches(m: Module, kernel: str) -> list[ast.Call]:
    return [n for n in ast.walk(m.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)
            and isinstance(n.func.value, ast.Name) and n.func.value.id == kernel]


def autotune(m: Module) -> bool:
    """triton.autotune over two configurations (warps, stages) on kernels that are not tuned yet; the
    launches stop passing num_warps and num_stages."""
    wrapped = {ast.unparse(t) for n in m.tree.body if isinstance(n, ast.Assign) and "autotune" in ast.unparse(n.value)
               for t in n.targets}
    changed = False
    for k in m.kernels():
        sites = _launches(m, k.name)
        if k.name in wrapped or any("autotune" in ast.unparse(d) for d in k.decorator_list) or not sites:
            continue
        warps = m.rng.sample((1, 2, 4, 8), 2)
        k.decorator_list.insert(0, _parse(
            f"triton.autotune(configs=[triton.Config({{}}, num_warps={warps[0]}, num_stages=2), "
            f"triton.Config({{}}, num_warps={warps[1]}, num_stages=3)], key=[])")[0].value)
        for call in sites:
            call.keywords = [kw for kw in call.keywords if kw.arg not in ("num_warps", "num_stages")]
        changed = True
    return changed


def copy_kernel(m: Module) -> bool:
    """Several kernels: the output (or the first input) also goes through a Triton copy kernel."""
    k, f = m.name(), m.name()
    at = m.tree.body.index(m.model)
    m.tree.body[at:at] = _parse(COPY_KERNEL.format(k=k, f=f))
    if m.rng.random() < 0.5:
        m.wrap_forward("", "out", f"return {f}(out)")
    else:
        first = m.params()[0]
        m.wrap_forward(f"{first} = {f}({first})", "out", "return out")
    return True


def constexpr_branch(m: Module) -> bool:
    """A constexpr switch on every kernel (default off, sometimes passed at the launch) guarding a
    compile-time print."""
    for k in m.kernels():
        flag = m.rng.choice(("DEBUG", "TRACE", "CHECKS", "VERBOSE"))
        k.args.args.append(ast.arg(flag, _parse("tl.constexpr")[0].value))
        k.args.defaults.append(ast.Constant(False))
        k.body[0:0] = _parse(f"if {flag}:\n    tl.static_print('{k.name}')")
        for call in _launches(m, k.name):
            if m.rng.random() < 0.5:
                call.keywords.append(ast.keyword(flag, ast.Constant(False)))
    return bool(m.kernels())


def cast_around(m: Module) -> bool:
    """Floating inputs cast to float32 for the kernels, the output cast back (tasks without weights)."""
    if m.has_params:
        return False
    before = "\n".join(f"{p} = {p}.float() if {p}.is_floating_point() else {p}" for p in m.params())
    first = m.params()[0]
    m.wrap_forward(f"dtype = {first}.dtype\n" + before, "out",
                   "return out.to(dtype) if out.is_floating_point() else out")
    return True


def custom_op(m: Module) -> bool:
    """The forward (of a module without weights or state) registered as a torch.library custom op."""
    fwd = m.forward
    if m.has_params or _uses_super(fwd) or any(isinstance(n, ast.Name) and n.id == "self" for s in fwd.body
                                                for n in ast.walk(s)):
        return False
    token = "".join(m.rng.choices("abcdefghijklmnopqrstuvwxyz", k=10))
    name, args = m.name(), m.params()
    typed = ", ".join(f"{a}: torch.Tensor" for a in args)
    fn = _parse(f"@torch.library.custom_op('drk_fair::op_{token}', mutates_args=())\n"
                f"def {name}({typed}) -> torch.Tensor:\n    pass")[0]
    fn.body = fwd.body
    m.tree.body.insert(m.tree.body.index(m.model), fn)
    fwd.body = _parse(f"return {name}({', '.join(args)})")
    return True


def no_grad(m: Module) -> bool:
    """forward under @torch.no_grad(), with a docstring."""
    m.forward.decorator_list.append(_parse("torch.no_grad()")[0].value)
    m.forward.body.insert(0, ast.Expr(ast.Constant("Runs the Triton kernels; no autograd graph is kept.")))
    return True


REWRITES = {f.__name__: f for f in (rename, helper_function, launcher_class, views, params_lookup, alloc_style,
                                    autotune, copy_kernel, constexpr_branch, cast_around, custom_op, no_grad)}


def rewrite(code: str, names: list[str], rng: random.Random, has_params: bool) -> tuple[str, list[str]]:
    """The honest `code` with the rewrites `names` applied in order; (source, those that applied)."""
    m = Module(code, rng, has_params)
    applied = [n for n in names if REWRITES[n](m)]
    return m.code(), applied
