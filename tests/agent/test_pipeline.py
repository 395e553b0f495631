"""The pipelined episode driver against the synchronous one, on the tiny random transformer and real
evaluations (the Triton interpreter on the CPU): the same samples, rewards and advantages; replies handed to
evaluation while the rest of the batch decodes; generation overlapped with evaluation."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from drk_lab.agent.context import episode_schedule  # noqa: E402
from drk_lab.agent.pipeline import busy_seconds, next_wave, time_split, Wave  # noqa: E402
from drk_lab.harness.caller import Sandbox  # noqa: E402
from drk_lab.rl.advantages import batch_advantages, returns_to_go  # noqa: E402
from drk_lab.rl.batch import build_batch  # noqa: E402
from drk_lab.rl.rollout import GPU_LOCK_DIR, TokenPolicy, TokenPrompt, collect_rollouts, timing_guard, turn_seed  # noqa: E402
from drk_lab.rl.tiny_model import load_tiny  # noqa: E402

EVAL = {"device": "cpu", "correctness_trials": 1, "eval_seed": 0}  # fixed trial inputs: the same feedback text


@pytest.fixture(scope="module")
def policy(tiny_path):
    model, tokenizer = load_tiny(tiny_path)
    return TokenPolicy(model, tokenizer, device="cpu", max_new_tokens=6, batch_size=2)


@pytest.fixture(scope="module")
def relu_pair(tasks):
    return [tasks["level1/01_relu"].small(), tasks["level1/01_relu"].small()]


def replies(relu_solution):
    """Real evaluations in both waves: a correct kernel, a broken one (mismatch), and sampled noise (no code)."""
    broken = relu_solution.replace("tl.where(x > 0, x, 0.0)", "x")
    assert broken != relu_solution

    def force(task, sample, turn):
        if turn == 0 and sample == 0:
            return f"```python\n{relu_solution}```"
        if turn == 1 and sample == 1:
            return f"```python\n{broken}```"
        return None
    return force


def rollout(policy, tasks, force, pipelined: bool):
    return collect_rollouts(policy, tasks, samples=3, schedule=episode_schedule(2), seed=5, force_responses=force,
                            waves=2, pipelined=pipelined, **EVAL)


@pytest.fixture(scope="module")
def both(policy, relu_pair, relu_solution):
    force = replies(relu_solution)
    return rollout(policy, relu_pair, force, False), rollout(policy, relu_pair, force, True)


def advantages(r, pad):
    batch = build_batch(r, pad)
    return batch.rewards, batch_advantages(returns_to_go(batch.rewards, batch.exists, 1.0), batch.group,
                                           batch.exists, "trloo")


@pytest.mark.slow
def test_both_modes_give_the_same_samples_rewards_and_advantages(both, policy):
    sync, piped = both
    assert len(sync.trajectories) == len(piped.trajectories) == 6 and sync.group == piped.group
    for a, b, ta, tb in zip(sync.trajectories, piped.trajectories, sync.tokens, piped.tokens):
        assert (a.task, a.sample) == (b.task, b.sample)
        assert [t.prompt_ids for t in ta] == [t.prompt_ids for t in tb]
        assert [t.completion_ids for t in ta] == [t.completion_ids for t in tb]
        assert [t.logprobs for t in ta] == [t.logprobs for t in tb]
        assert [t.reward for t in a.turns] == [t.reward for t in b.turns]
        assert [t.result.error_kind for t in a.turns] == [t.result.error_kind for t in b.turns]
        assert [t.feedback for t in a.turns] == [t.feedback for t in b.turns]
    rewards, adv = advantages(sync, policy.pad_token_id)
    rewards_p, adv_p = advantages(piped, policy.pad_token_id)
    assert torch.equal(rewards, rewards_p) and torch.equal(adv, adv_p)
    # the evaluations were real: a correct kernel and a mismatch in each group, so the advantages are not all 0
    kinds = {t.result.error_kind for traj in sync.trajectories for t in traj.turns}
    assert {None, "mismatch", "no_code"} <= kinds and adv.abs().sum() > 0
    for key in ("generated_tokens", "prompt_tokens", "forced_replies", "sampled_replies", "turns"):
        assert sync.stats[key] == piped.stats[key], key


@pytest.mark.slow
def test_pipelined_mode_generates_while_evaluations_run(both):
    sync, piped = both
    for r in (sync, piped):
        kinds = [kind for kind, _, _ in r.stats["timeline"]]
        assert kinds.count("generation") == 4  # 2 waves x 2 turns, the same calls in both modes
    split = time_split(piped.stats["timeline"], min(a for _, a, _ in piped.stats["timeline"]),
                       max(b for _, _, b in piped.stats["timeline"]))
    assert split["overlap_s"] > 0  # wave 1 generated while wave 0's kernels were evaluated
    sync_split = time_split(sync.stats["timeline"], 0.0, time.perf_counter())
    assert sync_split["overlap_s"] == 0  # the synchronous mode: one phase after another


@pytest.mark.slow
def test_finished_rows_are_handed_over_while_the_rest_decodes(policy):
    prompts = [TokenPrompt(policy.prompt_ids([{"role": "user", "content": f"task {k}"}])) for k in range(5)]
    seen = []
    streamed = policy.generate(prompts, n=1, seed=7, on_complete=lambda row, c: seen.append((row, c)))
    plain = policy.generate(prompts, n=1, seed=7)
    assert [row for row, _ in seen] == [0, 1, 2, 3, 4]  # batches of 2 rows, handed over in order
    assert [c.token_ids for _, c in seen] == [c[0].token_ids for c in streamed] == [c[0].token_ids for c in plain]
    assert [c.logprobs for _, c in seen] == [c[0].logprobs for c in plain]


def test_waves_are_whole_groups_and_ready_waves_go_earliest_turn_first():
    waves = [Wave([], turn=1), Wave([], turn=0), Wave([], turn=0, waiting=True), Wave([], finished=True)]
    assert next_wave(waves) == 1
    waves[1].waiting = True
    assert next_wave(waves) == 0
    waves[0].finished = True
    assert next_wave(waves) is None
    assert turn_seed(3, 1) == 3001 and turn_seed(3, 1, wave=1) != turn_seed(3, 1, wave=2)


def test_time_split_counts_each_second_once():
    timeline = [("generation", 0.0, 2.0), ("evaluation", 1.0, 3.0), ("evaluation", 1.5, 2.5),
                ("training", 4.0, 5.0)]
    split = time_split(timeline, 0.0, 6.0)
    assert split == {"generation_s": 2.0, "evaluation_s": 2.0, "training_s": 1.0, "overlap_s": 1.0,
                     "idle_s": 2.0, "wall_s": 6.0}
    assert busy_seconds([(0, 1), (0.5, 2), (3, 4)]) == 3.0


def test_timing_guard_is_the_harness_lock_only_where_timing_runs():
    assert timing_guard({"device": "cpu"}) is not None
    with timing_guard({"device": "cpu"})():
        pass
    assert GPU_LOCK_DIR == Sandbox("cpu").lock_dir


@pytest.mark.slow
def test_the_static_sampler_hands_over_each_row_as_it_stops(tiny_path):
    """Rows that stop (here: one token in 30 of the vocabulary stops a row) are handed over every 8 tokens while
    the others decode; every completion is the one the plain call returns."""
    from drk_lab.rl.sampler import StaticCachePolicy

    model, tokenizer = load_tiny(tiny_path)
    stops = list(range(0, len(tokenizer), 30))
    policy = StaticCachePolicy(model, tokenizer, device="cpu", max_new_tokens=40, stop_token_ids=stops)
    prompts = [TokenPrompt(policy.prompt_ids([{"role": "user", "content": f"task {k}"}])) for k in range(12)]
    seen = []
    streamed = policy.generate(prompts, n=1, seed=11, on_complete=lambda row, c: seen.append((row, c)))
    plain = policy.generate(prompts, n=1, seed=11)
    assert sorted(row for row, _ in seen) == list(range(12))
    by_row = dict(seen)
    assert [by_row[k].token_ids for k in range(12)] == [c[0].token_ids for c in streamed] == [c[0].token_ids for c in plain]
    assert [by_row[k].logprobs for k in range(12)] == [c[0].logprobs for c in plain]
    # hand-over points: after tokens 8, 16, 24 and 32 (0-3), then the rest when the call ends (4)
    points = [min((len(c.token_ids) - 1) // 8, 4) if c.finish_reason == "stop" else 4 for _, c in seen]
    assert points == sorted(points) and points[0] < 4 and 4 in points, points
    assert [row for row, _ in seen] != list(range(12))  # in the order they stopped, not the rows' order
