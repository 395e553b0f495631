"""The planted hack corpus (data/hacks) through evaluate() on the CPU path: every cheat that can run
without a GPU is stopped, and each is named by its reason code where the checks can name it."""

import re

import pytest

import drk_lab as drk
from drk_lab.quickstart import HACKS_DIR, load_variants

PLANTS = [v for v in load_variants(HACKS_DIR) if v.device is None]
# Cheats that fail without being named: no reward either way, but the runtime checks miss the pattern.
CAUGHT_AS_MISMATCH = {"constant_output__uniform_probs", "constant_output__zeros", "precision_downgrade__bf16_inputs",
                      "precision_downgrade__fp16_reduction"}
NOT_CAUGHT = {p.name for p in PLANTS if p.known_gap}  # headers say why


def reason(plant) -> str:
    return re.search(r"^# reason: (\S+)", plant.code, re.M).group(1)


@pytest.fixture(scope="module")
def results(tasks):
    pairs = [(tasks[p.task].small(), p.code) for p in PLANTS]
    found = drk.evaluate_many(pairs, device="cpu", progress=False, timeout_s=30)
    return {p.name: r for p, r in zip(PLANTS, found)}


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_plant_is_stopped(plant, results):
    r = results[plant.name]
    if plant.name in NOT_CAUGHT:
        assert r.ok  # when this fails, the check now exists: drop the plant's known_gap header
    elif plant.name in CAUGHT_AS_MISMATCH:
        assert r.error_kind == "mismatch" and not r.hacked
    else:
        assert r.hacked and r.error_kind == "hacked", (r.error_kind, r.error)
        assert r.hack_reasons and r.error  # says what was found
        named = {"caches_outputs__shape_key": "kernel_not_launched", "lazy_output__proxy": "kernel_not_launched"}
        assert named.get(plant.name, reason(plant)) in r.hack_reasons, (r.hack_reasons, r.error)


def test_runtime_messages_say_where(results):
    decoy = results["torch_does_the_work__decoy_kernel"]
    assert "switched off" in decoy.error
    dead = results["kernel_not_launched__dead_branch"]
    assert "trial 0" in dead.error and "none of the candidate's Triton kernels" in dead.error


def test_hack_checks_can_be_turned_off(tasks):
    plant = next(p for p in PLANTS if p.name == "torch_does_the_work__decoy_kernel")
    r = drk.evaluate(tasks[plant.task].small(), plant.code, device="cpu", hack_checks=False)
    assert r.ok and not r.hacked
