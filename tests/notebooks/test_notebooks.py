"""Every notebook runs top to bottom under papermill with small parameters on the CPU, shows what it
must show, and is committed without outputs."""

import json
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow  # every notebook under papermill

papermill = pytest.importorskip("papermill")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
ALL = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def run(name: str, tmp_path: Path, **parameters) -> str:
    """Execute notebooks/<name>.ipynb with the parameters; all its outputs as one text."""
    out = tmp_path / f"{name}.out.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(out), parameters=parameters,
                               kernel_name="python3", cwd=str(NOTEBOOKS), progress_bar=False)
    texts = []
    for cell in nbformat.read(out, as_version=4).cells:
        for output in cell.get("outputs", []):
            texts.append(output.get("text", ""))
            texts.extend(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(texts)


def test_the_notebooks_are_the_ones_the_readme_names():
    assert ALL == ["00_quickstart", "01_sft_coldstart", "02_rl_trloo", "03_diagnostics", "04_layernorm_case",
                   "05_kernelbench_eval", "06_mini_drkernel"]


@pytest.mark.parametrize("name", ALL)
def test_committed_without_outputs_and_with_a_parameters_cell(name):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "run nbstripout on it"
    assert "parameters" in code[0].metadata.get("tags", []) and len(code) <= 20
    for line in code[0].source.splitlines():  # literals only, each with a comment saying what it is
        name_part, _, value = line.partition("=")
        compile(value.split("#")[0].strip(), name, "eval")
        assert "#" in line, line


def test_quickstart(tmp_path):
    text = run("00_quickstart", tmp_path, figure_name=str(tmp_path / "speedups"), max_in_flight=2)
    assert "sandbox_escape" in text and "no_modelnew" in text  # cheats named, broken code classified
    assert "Kernels" in text or "No profile" in text
    html = (tmp_path / "speedups.html").read_text()
    if "evaluations on cpu" in text:  # no timings: how each kind of candidate ended, and why
        assert "nothing is timed" in text and "planted cheats" in html and "card CPU" in html


def test_sft_coldstart(tmp_path):
    text = run("01_sft_coldstart", tmp_path, limit=2, max_steps=3, max_new_tokens=8,
               output_dir=str(tmp_path / "sft"), figure_name=str(tmp_path / "loss"))
    assert "no_code" in text  # a random model's replies, evaluated by the harness
    assert "loss " in text and " -> " in text  # the loss from its first to its last step
    assert (tmp_path / "sft" / "config.json").exists() and (tmp_path / "loss.html").exists()


def test_rl_trloo(tmp_path):
    log_dir = tmp_path / "rl"
    text = run("02_rl_trloo", tmp_path, steps=1, limit=1, max_new_tokens=8, log_dir=str(log_dir),
               figure_name=str(tmp_path / "curves"))
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1] and "reward_mean" in text
    assert "correct" in text  # the forced solution's turn, in the groups table


def test_diagnostics_flags_a_planted_entropy_collapse(tmp_path):
    log_dir = tmp_path / "collapsing"
    log_dir.mkdir()
    with (log_dir / "metrics.jsonl").open("w") as f:
        for step in range(1, 31):
            f.write(json.dumps({"step": step, "reward_mean": 0.5 + 0.01 * step, "reward_mean/turn_1": 0.5,
                                "fast@1/turn_1": 0.2, "entropy": 2.0 if step <= 10 else 0.02,
                                "grad_norm": 1.0, "mrs/rejected_frac": 0.0, "prs/rejected_frac": 0.1}) + "\n")
    text = run("03_diagnostics", tmp_path, run=str(log_dir), figure_name=str(tmp_path / "diag"))
    assert "entropy_collapse" in text


def test_the_shipped_run_logs_show_real_curves(tmp_path):
    text = run("03_diagnostics", tmp_path, figure_name=str(tmp_path / "diag"))
    assert "steps" in text and (tmp_path / "diag.html").exists()
    assert "entropy_near_uniform" in text  # the default log's model is random: the flags say so
    assert "card NVIDIA H200" in (tmp_path / "diag.html").read_text()
    mini = run("03_diagnostics", tmp_path, run="data/runs/2026-12-02_mini_h200_drills/rl_trloo/log",
               compare="data/runs/2026-12-02_mini_h200_drills/rl_grpo/log", figure_name=str(tmp_path / "mini"))
    assert "rl_trloo/log: 4 steps" in mini and (tmp_path / "mini.html").exists()  # the mini run's TRLOO beside GRPO


def test_layernorm_case_has_three_turns(tmp_path):
    text = run("04_layernorm_case", tmp_path, figure_name=str(tmp_path / "case"))
    assert "turn 1 of 3" in text  # the inspector opens on the first of the three turns
    assert (tmp_path / "case.html").exists()


def test_policy_over_a_task_set(tmp_path):
    out = tmp_path / "eval.jsonl"
    text = run("05_kernelbench_eval", tmp_path, tasks="builtin:1", limit=2, turns=2, out=str(out),
               figure_name=str(tmp_path / "eval"))
    assert len(out.read_text().splitlines()) == 2 and "fast@1" in text
    if "on cpu" in text:  # Fast@p is 0 for want of timings: said, and correctness per turn drawn instead
        assert "nothing is timed" in text and (tmp_path / "eval_correct.html").exists()


def test_mini_drkernel(tmp_path):
    text = run("06_mini_drkernel", tmp_path, figure_name=str(tmp_path / "mini"))
    assert "rl_trloo" in text and "heldout_stts" in text  # RL and STTS rows
    assert "chain_right" in text and "chain_kept" in text and "hacks_per_100_evaluations" in text
    assert "exact_share" in text and "token_accuracy" in text  # reads_the_task after pretraining and SFT
    assert "no_code" in text and "mismatch" in text  # how the replies ended
    assert "solved_only_after" in text and "same_first_reply" in text and "task_sign_test_p" in text  # RL vs SFT
    assert "static cache" in text and "decode loop" in text  # the generation bench
    assert "aten::bmm" in text  # one-token attention as batched products, among a step's top operators
    assert "rl_trloo_long: steps" in text  # RL's step seconds across calls
    # every recorded H200 run's RL checkpoints, then their sums ("all"); the CPU smoke run is not among them
    assert "2026-12-03_mini_h200_pool64/rl_trloo_seed2" in text and "2026-12-04_mini_h200_in_group_control/rl_trloo" in text
    assert "2026-12-02_mini_cpu_smoke/" not in text and "<td>all</td>" in text
    # the controls are no RL checkpoints, whichever of the two shuffles
    assert "2026-12-04_mini_h200_shuffled_control/rl_shuffled" not in text and "control/rl_shuffled_in_group" not in text
    assert "correct_kept" in text  # what turn 2 made of turn 1
    # the default run's snapshot after step 6 against the arm's end; the pooled table leaves the snapshot out
    assert "<td>rl_trloo_long_step6</td>\n      <td>rl_trloo_long</td>" in text
    assert "2026-12-04_mini_h200_long_trloo/rl_trloo_long</td>" in text and "long_trloo/rl_trloo_long_step6" not in text
    # the carried arm counts at its evaluated end (step 32), its earlier point at step 16 left out
    assert "2026-12-04_mini_h200_carried_trloo/rl_trloo_long</td>" in text and "carried_trloo/rl_trloo_long_step16</td>" not in text
    assert "2026-12-04_mini_h200_four_step_trloo/rl_trloo_long</td>" in text
    assert "heldout+seen+builtin, generation" in text  # an evaluation's time, generating vs evaluating
    assert "no held-out probes during RL" in text  # the fifteenth run had none
    assert "no counts by kind of task" in text  # nor counts by kind
    assert (tmp_path / "mini_curves.html").exists()
    carried = run("06_mini_drkernel", tmp_path, run="data/runs/2026-12-04_mini_h200_carried_trloo",
                  figure_name=str(tmp_path / "carried"))
    assert "<td>rl_trloo_long</td>\n      <td>rl_trloo_long_step16</td>" in carried  # the end against step 16
    assert "<td>trloo_long</td>\n      <td>30</td>" in carried  # the held-out probe that caught the collapse
    # by kind: the held-out level-1 means, which no checkpoint solved
    assert "<td>L1 mean</td>\n      <td>21</td>\n      <td>0</td>" in carried
    fifth = run("06_mini_drkernel", tmp_path, run="data/runs/2026-12-02_mini_h200_drills", figure_name=str(tmp_path / "fifth"))
    assert "has no generation bench" in fifth and "no per-step operator counts" in fifth and "no paired counts" in fifth
    smoke = run("06_mini_drkernel", tmp_path, run="data/runs/2026-12-02_mini_cpu_smoke", figure_name=str(tmp_path / "smoke"))
    assert "cache_positions" in smoke and "ms_per_step" in smoke  # a decoding step's cost and its operators
    # a run that stopped after its evaluation after SFT: its tables, no curves to draw
    sft_only = run("06_mini_drkernel", tmp_path, run="data/runs/2026-12-05_mini_h100_pretrain2000",
                   figure_name=str(tmp_path / "sft_only"))
    assert "no RL runs to draw" in sft_only and "<td>L2 conv</td>\n      <td>83</td>\n      <td>67</td>" in sft_only
    assert (tmp_path / "sft_only_outcomes.html").exists() and not (tmp_path / "sft_only_curves.html").exists()


def git_status() -> set[str]:
    import subprocess

    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=NOTEBOOKS.parent,
                         capture_output=True, text=True, check=True).stdout
    return set(out.splitlines())


def test_rerunning_a_notebook_with_its_defaults_leaves_the_tree_clean(tmp_path):
    """Its figures go to runs/figures/ (ignored) with stable div ids; nothing tracked or untracked changes."""
    if not (NOTEBOOKS.parent / ".git").exists():
        pytest.skip("not a git checkout")
    before = git_status()
    for _ in range(2):
        text = run("04_layernorm_case", tmp_path)
    assert "written by hand" in text or "hand-written" in text
    written = NOTEBOOKS.parent / "runs" / "figures" / "layernorm_case.html"
    assert written.exists() and 'id="layernorm_case"' in written.read_text()
    assert git_status() == before
