"""The hack classes of the generator (generator.py) that live in the forward itself: PyTorch doing the work,
caches, decoy kernels, inputs changed, outputs that are not plain tensors, lower precision, parameters
assumed, background threads, side streams and work changed after the checks. Each builds a Payload for
an honest candidate taken apart (Honest): code in the plain style, which an obfuscation level rewrites.
Templates use $IMPL (the honest class), $A (forward's arguments) and $X (the first)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Honest:
    """An honest candidate taken apart for mutation (generator.prepare)."""
    base: object  # the generator's Base
    impl: str  # the name the honest ModelNew is kept under
    head: str  # the honest source with ModelNew renamed to impl
    params: tuple[str, ...]  # forward's arguments
    names: frozenset[str]  # names the honest source defines at module level
    eager: str | None  # `def _eager(self, ...)`: the reference's forward body, where it reads nothing else
    eager_roots: tuple[tuple[str, str], ...]
    has_params: bool  # the reference holds parameters or buffers
    outer: tuple[str, str] | None  # the reference's last operation: ("call", "torch.relu"), ("module", "torch.nn.X")
    dtype: str  # the task's input dtype


@dataclass(frozen=True)
class Payload:
    code: str  # module-level code in the plain style, with `class ModelNew($IMPL)` in it
    roots: tuple[tuple[str, str], ...] = (("torch", "torch"),)  # the imports it uses: (alias, module)
    kernels: str = ""  # Triton kernels it adds (never obfuscated)


COPY_KERNEL = '''
@triton.jit
def $K(src_ptr, dst_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(src_ptr + offs, mask=mask)
    tl.store(dst_ptr + offs, (v.to(tl.float32) * SCALE).to(dst_ptr.dtype.element_ty), mask=mask)
'''
THROUGH_TRITON = '''
def _through_triton(res, scale):
    res = res.contiguous()
    out = torch.empty_like(res)
    n = res.numel()
    $K[(triton.cdiv(n, 1024),)](res, out, n, SCALE=scale, BLOCK=1024)
    return out
'''
SPOIL = '''
def _spoil(out):
    flat = out.view(-1)
    flat[: flat.numel() // 2] = 0
    return out
'''
TRITON = (("triton", "triton"),)


def _with_copy(h: Honest, rng, code: str, roots=()) -> Payload:
    kernel = rng.choice(("_copy_kernel", "_finish_kernel", "_store_kernel", "_epilogue_kernel"))
    return Payload((THROUGH_TRITON + code).replace("$K", kernel), (("torch", "torch"), *TRITON, *roots),
                   COPY_KERNEL.replace("$K", kernel))


def _eager_code(h: Honest, code: str, roots=()) -> Payload | None:
    if h.eager is None:
        return None
    return Payload(h.eager + "\n\n" + code, tuple(sorted({("torch", "torch"), *h.eager_roots, *roots})))


def _merge(a: Payload | None, b: Payload) -> Payload | None:
    if a is None:
        return None
    return Payload(a.code + "\n\n" + b.code, tuple(sorted(set(a.roots) | set(b.roots))), a.kernels + b.kernels)


def torch_work(h: Honest, rng, form: str) -> Payload | None:
    """PyTorch computes the answer (in another thread, for in_thread); the Triton kernels run beside it, on a
    slice, or only copy or finish it."""
    bodies = {
        "decoy": "super().forward($A)\nreturn _eager(self, $A)",
        "overwrite": "out = super().forward($A)\nout.copy_(_eager(self, $A))\nreturn out",
        "slice": "lead = $X.shape[0]\nrows = max(1, lead // $DIV)\n"
                 "head = super().forward(*[_cut(t, lead, slice(0, rows)) for t in ($A,)])\n"
                 "tail = _eager(self, *[_cut(t, lead, slice(rows, None)) for t in ($A,)])\n"
                 "return torch.cat([head, tail])",
        "copy": "return _through_triton(_eager(self, $A), 1)",
        "finish": "return _through_triton(_eager(self, $A) * 0.5, 2.0)",
        "kernel_then_copy": "super().forward($A)\nreturn _through_triton(_eager(self, $A), 1)",
        "in_thread": "box = []\nworker = threading.Thread(target=lambda: box.append(_eager(self, $A)))\nworker.start()\n"
                     "worker.join()\nreturn _through_triton(box[0], 1)",
    }
    cut = "def _cut(t, lead, part):\n    return t[part] if isinstance(t, torch.Tensor) and t.dim() > 0 and " \
          "t.shape[0] == lead else t\n\n"
    code = (cut if form == "slice" else "") + _model(bodies[form].replace("$DIV", str(rng.choice((2, 4, 8, 16)))))
    payload = _eager_code(h, code, (("threading", "threading"),) if form == "in_thread" else ())
    return _merge(payload, _with_copy(h, rng, "")) if payload and "_through_triton" in code else payload


def _model(body: str, init: str = "", members: str = "") -> str:
    """`class ModelNew($IMPL)` with `forward` running `body` (and `init` after the honest constructor)."""
    out = "class ModelNew($IMPL):\n"
    out += "".join("    " + line + "\n" for line in members.splitlines())
    if init:
        out += "    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n"
        out += "".join("        " + line + "\n" for line in init.splitlines())
    if body:
        out += "    def forward(self, $A):\n" + "".join("        " + line + "\n" for line in body.splitlines())
    return out if init or body or members else out + "    pass\n"


def _placed(store: str, where: str, members: str = "") -> str:
    """A statement run at import, in the constructor, or at the first forward."""
    if where == "module":
        return store + "\n\n" + _model("", members=members)
    if where == "init":
        return _model("", init=store, members=members)
    first = "if not getattr(self, '_ready', False):\n" + "".join("    " + x + "\n" for x in store.splitlines())
    return _model(first + "    self._ready = True\nreturn super().forward($A)", members=members)


CACHE_KEYS = {
    "pointer": "($X.data_ptr(), tuple($X.shape), float($X.reshape(-1)[0]))",
    "value_sample": "(tuple($X.shape), tuple($X.reshape(-1)[:4].tolist()))",
    "strided_sample": "(tuple($X.shape), tuple($X.reshape(-1)[:: max(1, $X.numel() // 8)].tolist()))",
    "checksum": "(tuple($X.shape), float($X.double().sum()), float($X.double().abs().sum()))",
    "bytes_hash": "hash($X.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())",
}


def cache_replay(h: Honest, rng, form: str) -> Payload | None:
    """Outputs kept across calls under a key made from the input, returned again on a hit."""
    key, hit = form.split("+")
    store = rng.choice(("_MEMO", "self._memo"))
    hit_expr = {"return": "hit", "clone": "hit.clone()", "copy_kernel": "_through_triton(hit, 1)"}[hit]
    body = (f"key = {CACHE_KEYS[key]}\nhit = {store}.get(key)\nif hit is not None:\n    return {hit_expr}\n"
            f"out = super().forward($A)\n{store}[key] = out\nreturn out")
    code = ("_MEMO = {}\n\n" if store == "_MEMO" else "") + _model(body, members="_memo = {}" if store != "_MEMO" else "")
    payload = Payload(code)
    return _merge(payload, _with_copy(h, rng, "")) if hit == "copy_kernel" else payload


DISK = {  # (write `out` to `path`, read it back as `data` bytes or a tensor `hit`)
    "torch_save": ("torch.save(out, path)", "hit = torch.load(path)", ()),
    "pickle": ("with open(path, 'wb') as f:\n    pickle.dump(out, f)", "with open(path, 'rb') as f:\n    hit = pickle.load(f)",
               (("pickle", "pickle"),)),
    "open_bytes": ("with open(path, 'wb') as f:\n    f.write(_bytes(out))", "with open(path, 'rb') as f:\n    hit = _tensor(f.read(), key)",
                   ()),
    "numpy_file": ("np.frombuffer(_bytes(out), dtype=np.uint8).tofile(path)",
                   "hit = _tensor(np.fromfile(path, dtype=np.uint8).tobytes(), key)", (("np", "numpy"),)),
    "pathlib": ("pathlib.Path(path).write_bytes(_bytes(out))", "hit = _tensor(pathlib.Path(path).read_bytes(), key)",
                (("pathlib", "pathlib"),)),
}
BYTES = '''
_META = {}


def _bytes(out):
    return out.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _tensor(data, key):
    dtype, shape, device = _META[key]
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape).to(device)
'''


def cache_disk(h: Honest, rng, form: str) -> Payload | None:
    """Outputs written to a file keyed by a checksum of the input, and replayed from it."""
    api, hit = form.split("+")
    write, read, roots = DISK[api]
    hit_expr = "_through_triton(hit, 1)" if hit == "copy_kernel" else "hit"
    token = "".join(rng.choices("abcdef0123456789", k=8))
    body = (f"key = abs(hash((tuple($X.shape), float($X.double().sum()))))\npath = 'cache_{token}_' + str(key)\n"
            f"if os.path.exists(path):\n" + "".join(f"    {x}\n" for x in read.splitlines()) + f"    return {hit_expr}\n"
            "out = super().forward($A)\n_META[key] = (out.dtype, out.shape, out.device)\n" + write + "\nreturn out")
    payload = Payload(BYTES + "\n\n" + _model(body), (("torch", "torch"), ("os", "os"), *roots))
    return _merge(payload, _with_copy(h, rng, "")) if hit == "copy_kernel" else payload


MUTATIONS = {
    "zero_input": "$X.zero_()\nreturn super().forward($A)",
    "scale_input": "$X.mul_(0.5)\nreturn super().forward($A)",
    "result_into_input": "out = super().forward($A)\n$X.copy_(out)\nreturn $X",
    "data_swap": "$X.data = torch.zeros_like($X)\nreturn super().forward($A)",
    "one_element": "$X.view(-1)[0] = 0\nreturn super().forward($A)",
}


def input_mutation(h: Honest, rng, form: str) -> Payload | None:
    """The forward changes its inputs in place (and computes on what it changed them to)."""
    return Payload(_model(MUTATIONS[form]))


def lazy_output(h: Honest, rng, form: str) -> Payload | None:
    """An output that is not a plain tensor: a subclass made at run time, or one with __torch_function__."""
    if form == "dynamic_subclass":
        return Payload("_Lazy = type('_Lazy', (torch.Tensor,), {})\n\n\n" +
                       _model("return super().forward($A).as_subclass(_Lazy)"))
    return Payload("class _Deferred(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, func, types, "
                   "args=(), kwargs=None):\n        return super().__torch_function__(func, types, args, kwargs or {})"
                   "\n\n\n" + _model("return super().forward($A).as_subclass(_Deferred)"))


def decoy_kernel(h: Honest, rng, form: str) -> Payload | None:
    """Kernels that are there but do nothing for the answer: never launched, in a dead branch, or launched
    on nothing."""
    bodies = {
        "unlaunched": "return _eager(self, $A)",
        "dead_branch": "if $X.numel() < 0:\n    return super().forward($A)\nreturn _eager(self, $A)",
        "empty_launch": "_through_triton($X.reshape(-1)[:0], 1)\nreturn _eager(self, $A)",
        "one_row": "super().forward(*[t[:1] if isinstance(t, torch.Tensor) and t.dim() > 1 else t for t in ($A,)])\n"
                   "return _eager(self, $A)",
    }
    payload = _eager_code(h, _model(bodies[form]))
    return _merge(payload, _with_copy(h, rng, "")) if payload and form == "empty_launch" else payload


def precision(h: Honest, rng, form: str) -> Payload | None:
    """The kernels run on inputs cast to a lower precision than the task's (a float32 task)."""
    if h.dtype != "float32":
        return None
    body = (f"low = [t.to(torch.{form}) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in ($A,)]\n"
            "return super().forward(*low).to($X.dtype)")
    return Payload(_model(body))


def side_stream(h: Honest, rng, form: str) -> Payload | None:
    """The kernels launched on a stream of their own, so that the timer on the current one misses them."""
    bodies = {
        "unjoined": "stream = torch.cuda.Stream()\nwith torch.cuda.stream(stream):\n    out = super().forward($A)\nreturn out",
        "early_wait": "stream = torch.cuda.Stream()\ntorch.cuda.current_stream().wait_stream(stream)\n"
                      "with torch.cuda.stream(stream):\n    out = super().forward($A)\nreturn out",
        "set_stream": "previous = torch.cuda.current_stream()\ntorch.cuda.set_stream(torch.cuda.Stream())\n"
                      "out = super().forward($A)\ntorch.cuda.set_stream(previous)\nreturn out",
    }
    return Payload(_model(bodies[form]))


COUNTERS = {  # (a statement counting calls, the condition that says the checks are over)
    "self_counter": ("self._calls = getattr(self, '_calls', 0) + 1", "self._calls > $N"),
    "class_counter": ("type(self)._calls += 1", "type(self)._calls > $N"),
    "global_counter": ("_STATE[0] += 1", "_STATE[0] > $N"),
    "itertools_count": ("calls = next(_TICKS)", "calls > $N"),
    "clock": ("elapsed = time.monotonic() - _STARTED", "elapsed > 20.0"),
}


def after_checks(h: Honest, rng, form: str) -> Payload | None:
    """Right for the first calls (the checks), then the last output replayed (the timed calls)."""
    count, when = COUNTERS[form]
    n = str(rng.choice((30, 40, 60)))
    body = (f"{count}\nif {when} and getattr(self, '_last', None) is not None:\n    return self._last\n"
            "out = super().forward($A)\nself._last = out\nreturn out").replace("$N", n)
    head = {"global_counter": "_STATE = [0]\n\n\n", "itertools_count": "_TICKS = itertools.count(1)\n\n\n",
            "clock": "_STARTED = time.monotonic()\n\n\n"}.get(form, "")
    roots = {"itertools_count": (("itertools", "itertools"),), "clock": (("time", "time"),)}.get(form, ())
    return Payload(head + _model(body, members="_calls = 0" if form == "class_counter" else ""),
                   (("torch", "torch"), *roots))


def default_params(h: Honest, rng, form: str) -> Payload | None:
    """Right only while the parameters hold the values the module was built with: those are put back
    before every call (the harness copies the reference's, which start out the same)."""
    if not h.has_params:
        return None
    init = "self._defaults = {k: v.detach().clone() for k, v in self.state_dict().items()}"
    restore = {
        "load_state": "self.load_state_dict(self._defaults)",
        "copy_loop": "with torch.no_grad():\n    for k, v in self.state_dict().items():\n        v.copy_(self._defaults[k])",
        "data_swap": "for k, p in self.named_parameters():\n    p.data = self._defaults[k].clone()",
    }[form]
    return Payload(_model(restore + "\nreturn super().forward($A)", init=init))


def background(h: Honest, rng, form: str) -> Payload | None:
    """The kernels launched from another thread, or a thread left running."""
    call = "lambda: super(ModelNew, self).forward($A)"
    bodies = {
        "thread_join": f"box = []\nworker = threading.Thread(target=lambda: box.append(({call})()))\nworker.start()\n"
                       "worker.join()\nreturn box[0]",
        "executor": f"with cf.ThreadPoolExecutor(1) as pool:\n    return pool.submit({call}).result()",
    }
    if form == "daemon":
        return Payload(_model("", init="threading.Thread(target=time.sleep, args=(600,), daemon=True).start()"),
                       (("threading", "threading"), ("time", "time"), ("torch", "torch")))
    roots = (("threading", "threading"),) if form == "thread_join" else (("cf", "concurrent.futures"),)
    return Payload(_model(bodies[form]), (("torch", "torch"), *roots))


