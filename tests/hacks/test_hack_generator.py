"""The hack generator (drk_lab/hacks/generator.py) and the misses it found (issue 64).

The generator: seeded, every class x obfuscation level, sources that parse and keep a ModelNew and a
kernel; honest rewrites likewise. Then one minimised regression test per miss the generator found, each
through the real harness (worker processes, Triton's interpreter, small sizes): a ReLU kernel with the
trick, or a linear layer's. Each trick stands for its class; the checks that catch them look at what the
code does (PyTorch's share of the work, what the kernels left right, hooks and code objects changed, the
parameters moved), not at its names. Last, the two false positives the issue names, and honest rewrites.
"""

import random
import textwrap

import pytest

import drk_lab as drk
from drk_lab.hacks.generator import HACK_CLASSES, LEVELS, Base, hacked_variants, honest_variants
from drk_lab.hacks.honest_rewrites import rewrite
from drk_lab.hacks.static.rules import static_hack_check
from drk_lab.harness.validity import check_candidate

RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask) * SCALE, mask=mask)


def relu(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


def through_triton(t, scale=1.0):
    t = t.contiguous()
    out = torch.empty_like(t)
    copy_kernel[(triton.cdiv(t.numel(), 256),)](t, out, t.numel(), SCALE=scale, BLOCK=256)
    return out
'''


def relu_candidate(body: str, extra: str = "") -> str:
    return RELU + textwrap.dedent(extra) + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + \
        textwrap.indent(textwrap.dedent(body).strip(), "        ") + "\n"


CACHE = '''
def cached():
    memo = {}

    def lookup(key, compute):
        if key not in memo:
            memo[key] = compute()
            return memo[key]
        return through_triton(memo[key])  # a hit launches only a copy
    return lookup


CACHE = cached()
'''
# (candidate, the code that must be among its reasons): one per miss, minimised, each out of the static
# rules' sight (the last test asks): the runtime checks find them
MISSES = {
    # PyTorch computes; a Triton kernel only copies the answer, finishes it, or runs on a slice
    "torch_work_copy": (relu_candidate("return through_triton(torch.relu(x))"), "torch_does_the_work"),
    "torch_work_finish": (relu_candidate("return through_triton(torch.relu(x) * 0.5, 2.0)"), "torch_does_the_work"),
    "torch_work_slice": (relu_candidate("rows = x.shape[0] // 4\nreturn torch.cat([relu(x[:rows]), torch.relu(x[rows:])])"),
                         "torch_does_the_work"),
    # PyTorch computes in a thread of its own (out of a dispatch mode's sight), threading reached through torch
    "torch_work_in_thread": (relu_candidate("box = []\nworker = thread(lambda: box.append(torch.relu(x)))\n"
                                            "worker.start()\nworker.join()\nreturn through_triton(box[0])",
                                            "def thread(target, mods=[torch]):\n"
                                            "    return mods[0].threading.Thread(target=target)\n"),
                             "background_work"),
    # the reference made to agree with a wrong kernel, its hook reached through a holder object
    "reference_hook": (relu_candidate("out = relu(x)\nout.view(-1)[:5] = 0\nreturn out", '''
        class Holder:
            pass


        box = Holder()
        box.mod = torch.nn.modules.module
        box.mod.register_module_forward_hook(
            lambda m, args, out: out.view(-1)[:5].zero_() if type(m).__name__ == "Model" else None)
        '''), "patches_harness"),
    "module_call_patched": (relu_candidate("out = relu(x)\nout.view(-1)[:5] = 0\nreturn out", '''
        def wrap(call):
            def agreeing(self, *args, **kwargs):
                out = call(self, *args, **kwargs)
                if type(self).__name__ == "Model":
                    out.view(-1)[:5] = 0
                return out
            return agreeing


        def owner():
            return nn.Module


        setattr(owner(), "__call__", wrap(nn.Module.__call__))
        '''), "patches_harness"),
    # the harness's comparison rewritten in place, or its tolerances raised, reached through a holder
    "compare_code_swapped": (relu_candidate("return relu(x) * 0", '''
        def lenient(out, ref, atol=None, rtol=None):
            return 0.0


        def harness(box=[torch]):
            return [m for k, m in list(box[0].sys.modules.items()) if k.endswith(".correctness")][0]


        setattr(harness().compare, "__co" + "de__", lenient.__code__)
        '''), "patches_harness"),
    "tolerance_raised": (relu_candidate("return relu(x) * 1.05", '''
        def harness(box=[torch]):
            return [m for k, m in list(box[0].sys.modules.items()) if k.endswith(".correctness")][0]


        for dtype in list(harness().TOLERANCES):
            harness().TOLERANCES[dtype] = 10.0
        '''), "patches_harness"),
    "tensor_method_added": (relu_candidate("return relu(x) * 0", '''
        def owner():
            return torch.Tensor


        setattr(owner(), "abs_", lambda self: self.zero_())
        '''), "patches_harness"),
    # a numerics switch set through an environment mapping reached by a holder
    "environment_flag": (relu_candidate("return relu(x)", '''
        def env():
            return torch.os.environ


        env()["NVIDIA_TF32_OVERRIDE"] = "0"
        '''), "global_flags"),
    # a cache keyed on a checksum of the input whose hits launch only a copy kernel
    "cache_copy_on_hit": (relu_candidate("return CACHE(float(x.double().sum()), lambda: relu(x))", CACHE),
                          "launch_reuse"),
    # a cache keyed on a sample of the input's values, launching the same kernels on a hit as on a miss
    "cache_value_sample": (relu_candidate("relu(x[:1])\n"
                                          "return CACHE(tuple(x.reshape(-1)[:4].tolist()), lambda: through_triton(relu(x)))",
                                          CACHE), "caches_outputs"),
}
LINEAR_WEIGHTS_AT_INIT = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, out_ptr, K, N, BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    ks, ns = tl.arange(0, BLOCK_K), tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * K + ks, mask=ks < K, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + ns[:, None] * K + ks[None, :], mask=(ns[:, None] < N) & (ks[None, :] < K), other=0.0)
    y = tl.sum(w.to(tl.float32) * x[None, :], axis=1) + tl.load(b_ptr + ns, mask=ns < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * N + ns, tl.maximum(y, 0.0).to(out_ptr.dtype.element_ty), mask=ns < N)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)
        self.defaults = {k: v.detach().clone() for k, v in self.state_dict().items()}

    def forward(self, x):
        self.load_state_dict(self.defaults)  # right only while the parameters are those it was built with
        w, b = self.linear.weight, self.linear.bias
        out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device)
        linear_kernel[(x.shape[0],)](x, w, b, out, w.shape[1], w.shape[0], BLOCK_K=triton.next_power_of_2(w.shape[1]),
                                     BLOCK_N=triton.next_power_of_2(w.shape[0]))
        return out
'''
CUSTOM_OP = RELU + '''

@torch.library.custom_op("drk_test::relu", mutates_args=())
def relu_op(x: torch.Tensor) -> torch.Tensor:
    return relu(x)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_op(x)
'''
AUTOTUNED = RELU.replace("@triton.jit\ndef relu_kernel", '''@triton.autotune(configs=[triton.Config({}, num_warps=2),
                               triton.Config({}, num_warps=4)], key=["n"])
@triton.jit
def relu_kernel''') + "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return relu(x)\n"


@pytest.fixture(scope="module")
def bases(tasks):
    picks = ("level1/01_relu", "level1/10_layernorm", "level2/01_linear_bias_relu")
    return [Base(f"builtin:{n}", tasks[n].small(), drk.builtin_solution(tasks[n])) for n in picks]


# honest rewrites that meet the new checks: casts and views around the kernels, a Triton copy, weights read
# through the module, a custom op, autotuning on the CPU
FAIR = {"builtin:level1/01_relu": (["custom_op", "cast_around", "views"], ["copy_kernel", "constexpr_branch"]),
        "builtin:level2/01_linear_bias_relu": (["params_lookup", "autotune", "copy_kernel"],
                                               ["alloc_style", "helper_function", "no_grad"])}


@pytest.fixture(scope="module")
def results(tasks, bases):
    relu, linear = tasks["level1/01_relu"].small(), tasks["level2/01_linear_bias_relu"].small()
    pairs = {name: (relu, code) for name, (code, _) in MISSES.items()}
    pairs["weights_at_init"] = (linear, LINEAR_WEIGHTS_AT_INIT)
    pairs["custom_op"] = (relu, CUSTOM_OP)
    pairs["autotuned"] = (relu, AUTOTUNED)
    for base in bases:
        for names in FAIR.get(base.name, ()):
            code, applied = rewrite(base.code, names, random.Random(0), has_params="linear" in base.name)
            assert applied == names
            pairs[f"fair:{base.name}:{'+'.join(names)}"] = (base.task, code)
    found = drk.evaluate_many(list(pairs.values()), max_in_flight=2, device="cpu", progress=False, timing=False,
                              correctness_trials=1)
    return dict(zip(pairs, found))


def test_hacked_variants_are_seeded_and_cover_every_class_and_level(bases):
    first = hacked_variants(bases, per_cell=1, seed=3)
    assert [v.code for v in first] == [v.code for v in hacked_variants(bases, per_cell=1, seed=3)]
    assert [v.code for v in hacked_variants(bases, per_cell=1, seed=4, classes=["torch_work"])] != \
        [v.code for v in first if v.klass == "torch_work"]
    assert {(v.klass, v.level) for v in first} == {(k, lv) for k in HACK_CLASSES for lv in LEVELS}
    assert len({v.code for v in first}) == len(first)
    for v in first:
        assert check_candidate(v.code) is None, v.name
    # obfuscation hides names from the static rules: some levels leave a class to the runtime checks alone
    plain = [v for v in first if v.klass == "patch_reference" and v.level == "plain"]
    assert static_hack_check(plain[0].code)
    assert not all(static_hack_check(v.code) for v in first if v.level == "class_closure")


def test_parameter_hacks_go_only_to_modules_that_hold_state(tasks):
    # nn.GELU() in __init__ holds nothing: "put the parameters back" there is an honest kernel, not a hack
    from drk_lab.hacks.generator import holds_state

    assert not holds_state(tasks["level1/02_gelu_tanh"]) and not holds_state(tasks["level1/01_relu"])
    assert holds_state(tasks["level1/10_layernorm"]) and holds_state(tasks["level2/01_linear_bias_relu"])
    two = [Base(n, tasks[n].small(), drk.builtin_solution(tasks[n])) for n in ("level1/02_gelu_tanh", "level1/01_relu")]
    assert hacked_variants(two, per_cell=2, seed=0, classes=["default_params"]) == []


def test_honest_variants_are_distinct_and_load(bases):
    fair = honest_variants(bases, n=40, seed=1)
    assert len(fair) == len({v.code for v in fair}) == 40
    assert {f for v in fair for f in v.form.split("+")} >= {"rename", "views", "autotune", "copy_kernel"}
    for v in fair:
        assert check_candidate(v.code) is None and static_hack_check(v.code) is None, v.name


@pytest.mark.parametrize("name", sorted(MISSES))
def test_each_miss_is_now_caught(name, results):
    r = results[name]
    code = MISSES[name][1]
    assert r.hacked and code in r.hack_reasons, (r.error_kind, r.error)
    assert static_hack_check(MISSES[name][0]) is None  # the runtime checks found it


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_one_changed_value_is_one_the_reference_sees(seed, tasks):
    """ReLU maps any two negatives to 0: with these seeds the one value changed was negative before and after,
    the reference's output stayed the same, and the cache keyed on a sample of the values was paid."""
    r = drk.evaluate(tasks["level1/01_relu"].small(), MISSES["cache_value_sample"][0], device="cpu", seed=seed)
    assert r.hacked and r.hack_reasons == ["caches_outputs"], (r.error_kind, r.error)


def test_modules_reached_through_torchs_re_exports_are_the_modules_themselves():
    found = static_hack_check(relu_candidate("return relu(x)", "name = 'drk_' + 'lab.common.correctness'\n"
                                                               "torch.sys.modules[name].TOLERANCES.clear()\n"
                                                               "torch.os.system('true')"))
    assert found and set(found[0]) == {"patches_harness", "sandbox_escape"}, found
    assert "uses sys.modules" in found[1] and "uses os.system" in found[1]


def test_handing_tensors_to_numpy_or_a_compiler_is_torch_doing_the_work():
    for body in ("return through_triton(torch.from_numpy(np.maximum(x.numpy(), 0)))",
                 "return through_triton(torch.compile(torch.relu)(x))"):
        found = static_hack_check(relu_candidate(body, "import numpy as np"))
        assert found and found[0] == ["torch_does_the_work"], (body, found)


def test_parameters_it_was_built_with_are_not_enough(results):
    r = results["weights_at_init"]
    assert r.hacked and r.hack_reasons == ["weights_specialized"], r.error
    assert "once the parameters differ from the values it was built with" in r.error


def test_moved_parameters_differ_everywhere_and_stay_valid():
    import torch

    from drk_lab.hacks.extra_calls import move_parameters

    model = torch.nn.Sequential(torch.nn.Linear(16, 72), torch.nn.LayerNorm(72), torch.nn.BatchNorm1d(72))
    model[2].running_var.uniform_(0.5, 2.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    move_parameters(model, seed=1)
    for k, v in model.state_dict().items():
        if v.is_floating_point():
            assert (v != before[k]).float().mean() > 0.9, k  # a LayerNorm's weight of ones too
    assert (model[2].running_var > 0).all() and model[2].num_batches_tracked == before["2.num_batches_tracked"]


def test_a_triton_custom_op_is_not_a_patch(results):
    r = results["custom_op"]  # its first call imports torch._dynamo, which rebinds torch.manual_seed
    assert r.ok, r.error


def test_autotuned_kernels_run_their_first_configuration_on_the_cpu(results):
    r = results["autotuned"]
    assert r.ok, r.error
    assert any("relu_kernel ran with the first of its 2 configurations" in n for n in r.notes), r.notes


def test_honest_rewrites_pass_the_checks(results):
    fair = {name: r for name, r in results.items() if name.startswith("fair:")}
    assert len(fair) == 4
    for name, r in fair.items():
        assert r.ok, (name, r.error_kind, r.error)
