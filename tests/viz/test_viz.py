"""viz: each plot on crafted results and logs, save_figure, the turn inspector driven through its widgets,
and the live table outside a notebook and with a stand-in display function."""

import math
import shutil

import plotly.graph_objects as go
import pytest

from drk_lab.agent.metrics import fast_p_table
from drk_lab.agent.trajectory import Trajectory, Turn, write_jsonl
from drk_lab.harness.result import EvalResult
from drk_lab.viz import plots
from drk_lab.viz.inspector import NO_CODE, TurnInspector, render_html, turn_view
from drk_lab.viz.live import LiveTable

KERNELS = [{"name": "relu_kernel", "calls": 1, "total_us": 12.0, "mean_us": 12.0, "share": 0.8, "candidate": True},
           {"name": "aten::copy_", "calls": 1, "total_us": 3.0, "mean_us": 3.0, "share": 0.2}]


def timed(speedup, compile_speedup=None, **kw):
    return EvalResult(compiled=True, correct=True, speedup=speedup, speedup_compile=compile_speedup,
                      timings_valid=True, **kw)


def make_turn(task, index, code, result, reward, feedback=""):
    return Turn(task=task, index=index, iteration=0, context=list(range(index)), prompt_tokens=10, prompt_chars=40,
                response=f"reply {index}", finish_reason="stop", extraction="ok" if code else "no_code", code=code,
                result=result, reward=reward, feedback=feedback or f"feedback after turn {index + 1}")


def relu_trajectory(sample=0):
    code1 = "def relu(x):\n    return x.clamp(min=0)\n"
    code3 = "def relu(x):\n    return triton_relu(x)  # <fast>\n"
    turns = [make_turn("level1/relu", 0, code1, timed(0.8, 0.5, coverage=0.1), 0.2),
             make_turn("level1/relu", 1, None, EvalResult(), 0.0),
             make_turn("level1/relu", 2, code3, timed(1.6, 1.2, coverage=0.9, bandwidth_fraction=0.7,
                                                      kernels=KERNELS, bottleneck="memory bound"), 1.3)]
    return Trajectory(task="level1/relu", prompt="write relu", turns=turns, sample=sample)


def gelu_trajectory():
    hacked = EvalResult(compiled=True, correct=True, hacked=True, hack_reasons=["timing_hack"], speedup=50.0)
    return Trajectory(task="level1/gelu", prompt="write gelu", sample=1,
                      turns=[make_turn("level1/gelu", 0, "x = 1\n", EvalResult(error_kind="runtime"), -0.1),
                             make_turn("level1/gelu", 1, "x = 2\n", hacked, 0.0)])


# -- plots --------------------------------------------------------------------------------------

def test_speedup_chart_draws_timed_results_and_notes_the_rest():
    cpu = EvalResult(compiled=True, correct=True, device="cpu", timing_note="no timings: ran on the CPU ...")
    fig = plots.speedup_chart([("relu", timed(2.0, 1.5)), ("gelu", timed(0.5)), ("softmax", cpu),
                               ("cheat", EvalResult(correct=True, hacked=True, hack_reasons=["timing_hack"],
                                                    speedup=90.0))])
    eager, compiled = fig.data
    assert list(eager.x) == ["relu", "gelu"] and list(eager.y) == [2.0, 0.5]  # no zeros for the untimed
    assert list(compiled.y) == [1.5, None] and compiled.name == "vs torch.compile"
    assert [s.y0 for s in fig.layout.shapes] == [1.0]
    title = fig.layout.title.text
    assert "2 without timings" in title and "no timings on the CPU" in title and "hacked: timing_hack" in title
    assert "softmax" in title and "cheat" in title


def test_speedup_chart_on_cpu_only_results_has_no_bars():
    fig = plots.speedup_chart([("relu", EvalResult(correct=True, device="cpu"))])
    assert all(len(t.x) == 0 for t in fig.data) and "1 without timings (no timings on the CPU)" in fig.layout.title.text


def test_turn_chart_one_line_per_trajectory_and_metric():
    fig = plots.turn_chart([relu_trajectory(), gelu_trajectory()])
    assert len(fig.data) == 2 * 3
    relu_speedup, relu_coverage, relu_reward = fig.data[:3]
    assert relu_speedup.name == "level1/relu#0" and list(relu_speedup.x) == [1, 2, 3]
    assert list(relu_speedup.y) == [0.8, None, 1.6]
    assert list(relu_coverage.y) == [0.1, None, 0.9] and list(relu_reward.y) == [0.2, 0.0, 1.3]
    assert list(fig.data[3].y) == [None, None]  # gelu: an error, then a hack whose speedup does not count
    assert [t.showlegend for t in fig.data] == [True, False, False] * 2
    assert [a.text for a in fig.layout.annotations] == ["speedup", "coverage", "reward"]


def log(n=10, **extra):
    return [{"step": s, "reward_mean": 0.1 * s, "entropy": 1.0 + 0.01 * s if s != 4 else None, **extra}
            for s in range(1, n + 1)]


def test_run_curves_raw_and_smoothed():
    fig = plots.run_curves(log(), ["reward_mean", "entropy", "grad_norm"], smooth=0.5)
    raw, smoothed = fig.data[0], fig.data[1]
    assert list(raw.x) == list(range(1, 11)) and raw.opacity == 0.25
    assert list(smoothed.y[:3]) == pytest.approx([0.1, 0.15, 0.225])
    assert len(fig.data[2].x) == 9  # entropy's None at step 4 is skipped
    assert len(fig.data) == 4 and [a.text for a in fig.layout.annotations] == ["reward_mean", "entropy"]
    assert "not drawn: grad_norm (not logged)" in fig.layout.title.text  # a key never logged gets no panel


def test_compare_runs_one_color_per_run():
    fig = plots.compare_runs({"trloo": log(), "grpo": [{**r, "reward_mean": 0.05 * r["step"]} for r in log()]},
                             ["reward_mean", "entropy"])
    assert len(fig.data) == 2 * 2 * 2
    trloo, grpo = fig.data[1], fig.data[5]
    assert (trloo.name, grpo.name) == ("trloo", "grpo") and trloo.line.color != grpo.line.color
    assert grpo.y[-1] < trloo.y[-1]
    assert [t.name for t in fig.data if t.showlegend] == ["trloo", "grpo"]


def test_speedup_histogram_log_bins_and_failures_in_the_title():
    results = [timed(0.5), timed(1.0), timed(2.0), timed(4.0), EvalResult(error_kind="compile"), None,
               EvalResult(correct=True, hacked=True, speedup=9.0)]
    fig = plots.speedup_histogram(results)
    (hist,) = fig.data
    assert list(hist.x) == pytest.approx([math.log10(v) for v in (0.5, 1.0, 2.0, 4.0)])
    assert list(hist.customdata) == [0.5, 1.0, 2.0, 4.0]
    assert "4 timed" in fig.layout.title.text and "3 failed, hacked or untimed" in fig.layout.title.text
    assert "geomean 1.41x" in fig.layout.title.text
    assert "1x" in fig.layout.xaxis.ticktext and "0.5x" in fig.layout.xaxis.ticktext
    assert "0 timed" in plots.speedup_histogram([None]).layout.title.text


def test_fast_p_chart_from_fast_p_table():
    table = fast_p_table({"a": [timed(1.3), timed(2.5)], "b": [EvalResult(), timed(1.1)]}, ps=(1.0, 2.0))
    fig = plots.fast_p_chart(table)
    names = [t.name for t in fig.data]
    assert names == ["Fast@1", "best Fast@1", "Fast@2", "best Fast@2"]
    assert list(fig.data[0].y) == [0.5, 1.0] and list(fig.data[2].y) == [0.0, 0.5]
    assert fig.data[1].line.dash == "dash" and "2 tasks" in fig.layout.title.text


def has_browser() -> bool:
    return any(shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome"))


def test_outcome_chart_stacks_each_checkpoints_shares():
    rows = [{"checkpoint": "sft", "mismatch": 6, "correct": 2}, {"checkpoint": "rl", "syntax": 3, "correct": 1}]
    fig = plots.outcome_chart(rows)
    assert [t.name for t in fig.data] == ["correct", "mismatch", "syntax"] and fig.layout.barmode == "stack"
    shares = {t.name: list(t.y) for t in fig.data}
    assert shares == {"correct": [0.25, 0.25], "mismatch": [0.75, 0.0], "syntax": [0.0, 0.75]}
    assert list(fig.data[0].customdata) == [2, 1]


@pytest.mark.slow
def test_save_figure_writes_html_and_png(tmp_path):
    fig = go.Figure(go.Bar(x=["a"], y=[1.0]))
    paths = plots.save_figure(fig, "bars", folder=tmp_path / "figs")
    html = tmp_path / "figs" / "bars.html"
    assert paths[0] == html and "plotly" in html.read_text()
    if not has_browser():
        pytest.skip("no Chrome or Chromium for kaleido: PNG not checked")
    assert paths[1] == tmp_path / "figs" / "bars.png" and paths[1].read_bytes()[:4] == b"\x89PNG"


def test_save_figure_keeps_the_html_when_png_export_fails(tmp_path, monkeypatch, capsys):
    fig = go.Figure(go.Bar(x=["a"], y=[1.0]))

    def no_browser(*args, **kwargs):
        raise RuntimeError("Kaleido requires Google Chrome")

    monkeypatch.setattr(fig, "write_image", no_browser)
    assert plots.save_figure(fig, "bars", folder=tmp_path) == [tmp_path / "bars.html"]
    assert (tmp_path / "bars.html").exists() and not (tmp_path / "bars.png").exists()
    assert "PNG export failed (RuntimeError: Kaleido requires Google Chrome)" in capsys.readouterr().out


# -- the inspector ------------------------------------------------------------------------------

def test_turn_view():
    traj = relu_trajectory()
    first, second, third = (turn_view(traj, i) for i in range(3))
    assert first["title"] == "level1/relu · sample 0 · turn 1 of 3" and first["diff"] == ""
    assert second["code"] == NO_CODE and second["diff"] == ""
    assert third["diff"].splitlines()[:2] == ["--- turn 1", "+++ turn 3"]  # against the last turn with code
    assert "-    return x.clamp(min=0)" in third["diff"] and "+    return triton_relu(x)  # <fast>" in third["diff"]
    assert third["feedback"] == "feedback after turn 3"
    assert third["metrics"]["speedup"] == 1.6 and third["metrics"]["coverage"] == 0.9
    assert third["metrics"]["reward"] == 1.3 and third["metrics"]["bandwidth_fraction"] == 0.7
    assert "relu_kernel" in third["kernels"] and first["kernels"] == "(no GPU kernels recorded)"
    assert "no turn 5" in turn_view(traj, 4)["title"]
    hacked = turn_view(gelu_trajectory(), 1)["metrics"]
    assert hacked["hacked"] is True and hacked["hack_reasons"] == ["timing_hack"]


def test_render_html_escapes_and_marks_the_turn():
    html = render_html(turn_view(relu_trajectory(), 2))
    assert '<div class="drk-turn">' in html and "turn 3 of 3</h4>" in html
    assert "# &lt;fast&gt;" in html and "<fast>" not in html
    assert "memory bound" in html


def test_inspector_driven_by_its_widgets():
    inspector = TurnInspector([relu_trajectory(), gelu_trajectory(), relu_trajectory(sample=1)])
    assert inspector.turn.value == 1 and inspector.turn.max == 3  # opens on the first turn
    assert "turn 1 of 3" in inspector.html.value
    inspector.turn.value = 3
    assert "turn 3 of 3" in inspector.html.value
    assert [shape.x0 for shape in inspector.figure.layout.shapes] == [3, 3, 3]

    inspector.turn.value = 2
    assert "turn 2 of 3" in inspector.html.value and NO_CODE in inspector.html.value
    assert [shape.x0 for shape in inspector.figure.layout.shapes] == [2, 2, 2]
    assert list(inspector.figure.data[0].y) == [0.8, None, 1.6]  # speedup across the turns
    bundle = inspector.plot.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert bundle["layout"]["title"]["text"] == "turn 2 of 3"

    inspector.turn.value = 1
    assert "turn 1 of 3" in inspector.html.value and "no diff" in inspector.html.value

    assert [label for label, _ in inspector.sample.options] == ["sample 0 · 3 turns", "sample 1 · 3 turns"]
    inspector.task.value = "level1/gelu"
    assert inspector.trajectory.task == "level1/gelu" and inspector.turn.max == 2 and inspector.turn.value == 1
    assert "level1/gelu · sample 1 · turn 1 of 2" in inspector.html.value
    inspector.turn.value = 2
    assert "drk-diff" in inspector.html.value and "+x = 2" in inspector.html.value
    assert "timing_hack" in inspector.html.value
    assert list(inspector.figure.data[2].y) == [-0.1, 0.0]  # reward

    inspector.task.value = "level1/relu"
    inspector.sample.value = inspector.sample.options[1][1]
    assert inspector.trajectory.sample == 1 and "sample 1 · turn 2 of 3" in inspector.html.value


def test_inspector_from_jsonl_and_its_notebook_display(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    write_jsonl([relu_trajectory(), gelu_trajectory()], path)
    inspector = TurnInspector.from_jsonl(path)
    assert len(inspector.trajectories) == 2 and list(inspector.task.options) == ["level1/relu", "level1/gelu"]
    bundle = inspector._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == inspector.widget.model_id
    assert "turn 1 of 3" in bundle["text/plain"]
    assert TurnInspector([relu_trajectory()], first_turn=3).turn.value == 3


# -- the live table ---------------------------------------------------------------------------

def test_live_table_prints_a_line_per_step_outside_a_notebook(capsys):
    live = LiveTable(["reward_mean", "entropy"])
    for row in log(3):
        live.callback(row)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["step 1 | reward_mean 0.1 | entropy 1.01", "step 2 | reward_mean 0.2 | entropy 1.02",
                     "step 3 | reward_mean 0.3 | entropy 1.03"]
    every_other = LiveTable(["reward_mean"], every=2)
    for row in log(4):
        every_other.update(row)
    assert capsys.readouterr().out.splitlines() == ["step 2 | reward_mean 0.2", "step 4 | reward_mean 0.4"]
    assert len(every_other.rows) == 4


class FakeHandle:
    def __init__(self, bundle):
        self.shown = [bundle]

    def update(self, bundle, raw=False):
        assert raw
        self.shown.append(bundle)


def test_live_table_updates_its_displays_in_place():
    shown = []

    def display(obj, raw=False, display_id=None):
        shown.append(obj)
        if isinstance(obj, dict):
            assert raw and display_id is True
            return FakeHandle(obj)
        return None

    live = LiveTable(["reward_mean", "entropy"], last=2, display=display)
    for row in log(5):
        live.update(row)
    assert len(shown) == 2 and shown[1] is live.plot  # the table and the figure's Output, then only updates
    table = live._table
    assert len(table.shown) == 5
    html = table.shown[-1]["text/html"]
    assert html.count("<tr>") == 3 and "<td>5</td>" in html and "<td>4</td>" in html and "<td>3</td>" not in html
    assert "<td>4</td><td>0.4</td><td>-</td>" in html and "<th>entropy</th>" in html  # step 4's None
    (output,) = live.plot.outputs
    fig = output["data"]["application/vnd.plotly.v1+json"]
    assert fig["layout"]["title"]["text"].startswith("Training curves, 5 steps")
    assert fig["data"][0]["x"] == [1, 2, 3, 4, 5] and fig["data"][1]["name"] == "run"


def test_figure_bundle_is_plain_json():
    bundle = plots.figure_bundle(go.Figure(go.Scatter(x=[1, 2], y=[3, 4]), layout={"title": "t"}))
    assert bundle["application/vnd.plotly.v1+json"]["data"][0]["y"] == [3, 4]
    assert bundle["text/plain"] == "<plotly figure: t>"


def test_live_table_shows_each_nth_steps_groups(tmp_path, capsys):
    rollouts = tmp_path / "rollouts"
    write_jsonl([relu_trajectory(0), relu_trajectory(1)], rollouts / "step_000002.jsonl")
    live = LiveTable(["reward_mean"], rollouts=rollouts, groups_every=2)
    live.update({"step": 1, "reward_mean": 0.1})
    assert "sampled completions" not in capsys.readouterr().out
    live.update({"step": 2, "reward_mean": 0.2})
    out = capsys.readouterr().out
    assert "step 2: sampled completions" in out and out.count(relu_trajectory().task) >= 2


@pytest.mark.slow
def test_saved_html_figures_work_offline_and_are_written_the_same_twice(tmp_path):
    """plotly.js from a file beside (no CDN: cluster nodes are offline), the div id from the name."""
    import plotly.graph_objects as go

    from drk_lab.viz.plots import save_figure

    fig = go.Figure(go.Scatter(y=[1, 3, 2]))
    html = save_figure(fig, "curve", folder=tmp_path)[0]
    first = html.read_bytes()
    assert b"cdn.plot.ly" not in first and b'src="plotly.min.js"' in first and b'id="curve"' in first
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000
    save_figure(fig, "curve", folder=tmp_path)
    assert html.read_bytes() == first
