import ast
import io
import math
import random
import tokenize
from concurrent.futures import ThreadPoolExecutor

import pytest

import drk_lab as drk
from drk_lab.harness.task import DATA_DIR
from drk_lab.policies.evolve import EvolutionaryPolicy, extract_code, parse_feedback
from drk_lab.policies.launch_search import mutate, tunable_parameters

PLAIN = {f"{p.parent.name}/{p.stem}": p.read_text() for p in sorted((DATA_DIR / "plain").glob("level*/*.py"))}
SOLUTIONS = {f"{p.parent.name}/{p.stem}": p.read_text() for p in sorted((DATA_DIR / "solutions").glob("level*/*.py"))}
ALL_SOURCES = [("plain", k, v) for k, v in PLAIN.items()] + [("solution", k, v) for k, v in SOLUTIONS.items()]


def number_changes(parent: str, child: str) -> list[tuple[int, int, int]]:
    """(char offset, old, new) of every token that differs; fails unless only integer literals differ."""
    tokens = [list(tokenize.generate_tokens(io.StringIO(src).readline)) for src in (parent, child)]
    assert len(tokens[0]) == len(tokens[1])
    starts = [0]
    for line in parent.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    out = []
    for a, b in zip(*tokens):
        if a.string != b.string:
            assert a.type == b.type == tokenize.NUMBER, (a, b)
            out.append((starts[a.start[0] - 1] + a.start[1], int(a.string), int(b.string)))
    return out


def test_plain_kernels_cover_enough_tasks_and_have_tile_parameters():
    tasks = {f"level{t.level}/{t.name}" for t in drk.builtin_tasks()}
    assert len(PLAIN) >= 8 and set(PLAIN) <= tasks
    assert {k.split("/")[0] for k in PLAIN} == {"level1", "level2"}
    for key, code in PLAIN.items():
        kinds = {s.kind for s in tunable_parameters(code)}
        assert {"tile", "num_warps"} <= kinds, key


def test_row_covering_and_linked_literals_stay_untouched():
    # softmax's BLOCK covers a whole row (triton.next_power_of_2, only a tensor extent): no BLOCK site
    labels = [s.label for s in tunable_parameters(SOLUTIONS["level1/08_softmax"])]
    assert labels and all("num_warps" in lab for lab in labels)
    # cross-entropy's mean kernel gets BLOCK=1024 while `block // 1024` sits in the same function: linked
    assert not any(s.label == "mean_kernel.BLOCK" for s in tunable_parameters(SOLUTIONS["level1/16_cross_entropy"]))
    covering = '''
import triton, triton.language as tl
@triton.jit
def k(x_ptr, n_cols, ROW: tl.constexpr, BLOCK: tl.constexpr, CHUNK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n_cols + cols, mask=cols < ROW)
    for s in range(0, n_cols, CHUNK):
        pass
def launch(x, n):
    grid = (triton.cdiv(n, 512),)
    k[(n,)](x, n, 77, 1024, CHUNK=512, num_warps=4)
    k[(n,)](x, n, ROW=77, BLOCK=1024, CHUNK=256, num_stages=2)
'''
    found = {(s.label, s.value) for s in tunable_parameters(covering)}
    assert found == {("k.CHUNK", 256), ("k num_warps", 4), ("k num_stages", 2)}  # CHUNK=512 is tied to the grid
    shared = '''
import triton, triton.language as tl
@triton.jit
def tiles(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
@triton.jit
def row(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
def launch(x, n):
    BLOCK = 256
    tiles[(triton.cdiv(n, BLOCK),)](x, n, BLOCK=BLOCK)
    row[(1,)](x, BLOCK=BLOCK)
'''
    assert tunable_parameters(shared) == []  # the name also sets a row-covering extent


def test_autotune_configs_are_tuned():
    code = '''
import triton, triton.language as tl
@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 128, "WIDTH": 7}, num_warps=4, num_stages=2),
                          triton.Config({"BLOCK_SIZE": 1024}, num_warps=8)], key=["n"])
@triton.jit
def k(x_ptr, n, WIDTH: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    y = WIDTH
'''
    found = sorted((s.label, s.kind, s.value) for s in tunable_parameters(code))
    assert found == [("config num_stages", "num_stages", 2), ("config num_warps", "num_warps", 4),
                     ("config num_warps", "num_warps", 8), ("k config BLOCK_SIZE", "tile", 128),
                     ("k config BLOCK_SIZE", "tile", 1024)]


@pytest.mark.parametrize("temperature", [0.0, 3.0])
def test_mutations_change_only_tunable_literals_within_bounds(temperature):
    rng = random.Random(7)
    for origin, key, code in ALL_SOURCES:
        found_sites = tunable_parameters(code)
        sites = {s.start: s for s in found_sites}
        for _ in range(3):
            found = mutate(code, rng, temperature, found_sites)
            if not sites:
                assert found is None
                break
            child, changes = found
            ast.parse(child)
            diffs = number_changes(code, child)
            assert diffs and child != code, (origin, key)
            for offset, old, new in diffs:
                site = sites[offset]  # only literals found as parameters change
                assert old == site.value and site.lo <= new <= site.hi, (key, site.label, new)
                if site.pow2:
                    assert new & (new - 1) == 0
            if temperature == 0:
                assert len(diffs) == 1 and (abs(math.log2(diffs[0][2] / diffs[0][1])) == 1
                                            or abs(diffs[0][2] - diffs[0][1]) == 1)


def test_temperature_sets_the_spread():
    code = PLAIN["level1/12_matmul_fp16"]

    def spread(temperature):
        rng = random.Random(3)
        counts, steps = [], []
        sites = tunable_parameters(code)
        for _ in range(60):
            child, _ = mutate(code, rng, temperature, sites)
            diffs = number_changes(code, child)
            counts.append(len(diffs))
            steps += [abs(math.log2(new / old)) for _, old, new in diffs]
        return sum(counts) / len(counts), sum(steps) / len(steps)

    cold, hot = spread(0.0), spread(4.0)
    assert cold == (1.0, pytest.approx(cold[1])) and cold[1] <= 1.0
    assert hot[0] > 2.0 and hot[1] > 1.4


def result(correct=True, speedup=None, hacked=False):
    return {"correct": correct, "hacked": hacked, "speedup": speedup,
            "error_kind": "hacked" if hacked else (None if correct else "mismatch")}


def test_first_turn_is_the_seed_then_distinct_mutants():
    seed = PLAIN["level1/08_softmax"]
    policy = EvolutionaryPolicy(seed, seed=1)
    first = policy.generate([[{"role": "user", "content": "write softmax"}]], n=3)[0]
    assert extract_code(first[0].text).strip() == seed.strip() and first[0].extra["kind"] == "seed"
    codes = [extract_code(c.text) for c in first] + [extract_code(c.text) for c in
                                                     policy.generate([[{"role": "user", "content": "x"}]], n=4)[0]]
    assert len({c.strip() for c in codes}) == len(codes)
    assert all(c.extra["kind"] == "mutation" and c.extra["changes"] for c in first[1:])


def test_observe_moves_the_parent_to_the_fastest_correct_kernel():
    seed = PLAIN["level1/12_matmul_fp16"]
    policy = EvolutionaryPolicy({"level1/12_matmul_fp16": seed}, temperature=0.0, seed=2)
    ask = [[{"role": "user", "content": "Task level1/12_matmul_fp16: write ModelNew"}]]
    assert extract_code(policy.generate(ask)[0][0].text).strip() == seed.strip()
    policy.observe("level1/12_matmul_fp16", seed, result(speedup=1.0))
    a, b, c, d = [extract_code(x.text) for x in policy.generate(ask, n=4)[0]]
    policy.observe("level1/12_matmul_fp16", a, result(speedup=1.5))
    policy.observe("level1/12_matmul_fp16", b, result(speedup=0.8))
    policy.observe("level1/12_matmul_fp16", c, result(correct=False, speedup=None))
    policy.observe("level1/12_matmul_fp16", d, result(speedup=9.0, hacked=True))
    assert policy.best("level1/12_matmul_fp16") == (a, 1.5)
    for child in policy.generate(ask, n=5)[0]:
        assert child.extra["parent_speedup"] == 1.5
        assert len(number_changes(a, extract_code(child.text))) == 1  # temperature 0: next to the best
    policy.observe("level1/12_matmul_fp16", a, result(speedup=1.1))  # measured again: the mean counts
    assert policy.best("level1/12_matmul_fp16") == (a, pytest.approx(1.3))


def test_memory_keeps_the_last_twenty_and_the_best_survives():
    seed = PLAIN["level1/01_relu"]
    policy = EvolutionaryPolicy(seed, seed=0)
    codes = [extract_code(c.text) for c in policy.generate([[{"role": "user", "content": "relu"}]], n=30)[0]]
    policy.observe("*", codes[0], result(speedup=2.0))
    for code in codes[1:]:
        policy.observe("*", code, result(speedup=1.0))
    assert len(policy.memory("*")) == 20
    assert policy.best("*") == (codes[0], 2.0)


def test_conversation_feedback_when_observe_is_never_called():
    seed = PLAIN["level1/01_relu"]
    policy = EvolutionaryPolicy({"01_relu": seed, "08_softmax": PLAIN["level1/08_softmax"]}, seed=4)
    slower, faster = (extract_code(c.text) for c in policy.generate([[{"role": "user", "content": "01_relu"}]], n=2)[0])
    talk = [{"role": "user", "content": "Optimise task 01_relu"},
            {"role": "assistant", "content": f"```python\n{slower}```"},
            {"role": "user", "content": "Status: correct  speedup 1.10x. Improve it."},
            {"role": "assistant", "content": f"try this\n```python\n{faster}```"},
            {"role": "user", "content": "Status: correct  speedup 1.90x (vs compile 1.2x)"}]
    out = policy.generate([talk], n=1)[0][0]
    assert out.extra["task"] == "01_relu" and policy.best("01_relu") == (faster, 1.9)
    assert parse_feedback("mismatch: max abs error 0.3; correct outputs expected") == (False, None)
    with pytest.raises(ValueError):
        policy.generate([[{"role": "user", "content": "an unknown task"}]])


@pytest.mark.slow
def test_mutants_pass_the_real_harness_on_cpu():
    tasks = {f"level{t.level}/{t.name}": t for t in drk.builtin_tasks()}
    rng = random.Random(11)
    picks = [(PLAIN, "level1/08_softmax", True), (PLAIN, "level1/06_sum_last_dim", True),
             (PLAIN, "level2/10_bias_gelu_channel_scale", True), (PLAIN, "level1/12_matmul_fp16", False),
             (SOLUTIONS, "level2/01_linear_bias_relu", False), (SOLUTIONS, "level1/06_sum_last_dim", True)]
    pairs, checks = [], []
    for sources, key, checks_on in picks:
        child, changes = mutate(sources[key], rng, 2.0)
        pairs.append((tasks[key].small(), child))
        checks.append(checks_on)
    with ThreadPoolExecutor(2) as pool:  # the hack checks (other shapes included) only where they are quick
        results = list(pool.map(lambda job: drk.evaluate(job[0][0], job[0][1], device="cpu", correctness_trials=1,
                                                         hack_checks=job[1]), zip(pairs, checks)))
    assert [r.summary() for r in results] == ["correct"] * len(picks)


def test_search_loop_through_the_harness():
    task = {f"level{t.level}/{t.name}": t for t in drk.builtin_tasks()}["level1/01_relu"].small()
    policy = EvolutionaryPolicy({"01_relu": PLAIN["level1/01_relu"]}, seed=5)
    ask = [[{"role": "user", "content": "write a fast kernel"}]]
    for turn in range(2):
        for completion in policy.generate(ask, n=2, task_names=["01_relu"])[0]:
            code = extract_code(completion.text)
            res = drk.evaluate(task, code, device="cpu", correctness_trials=1)
            assert res.correct, res.summary()
            policy.observe("01_relu", code, res)
    assert len(policy.memory("01_relu")) == 4
    assert policy.best("01_relu")[0].strip() == PLAIN["level1/01_relu"].strip()  # untimed: the first correct one stays
