"""The turn inspector: step through trajectories turn by turn (code, diff, feedback, metrics, kernels).

    TurnInspector.from_jsonl("runs/eval/trajectories.jsonl")   # last in a notebook cell shows it

turn_view(trajectory, index) gathers what one turn shows as plain data; render_html turns that into
HTML. TurnInspector only wires ipywidgets (task and sample dropdowns, a turn slider driven by a Play
button) to those two functions and a plotly chart of speedup, coverage and reward across the turns.
Tests drive it by setting widget values (`inspector.turn.value = 2`) and reading `inspector.html.value`
and `inspector.figure`.
"""

from __future__ import annotations

import difflib
import html as html_lib
from contextlib import contextmanager
from pathlib import Path

import ipywidgets as widgets
import plotly.graph_objects as go

from drk_lab.agent.trajectory import Trajectory, read_jsonl
from drk_lab.harness.profiler import format_kernel_table
from drk_lab.viz.plots import figure_output, turn_chart

NO_CODE = "(the reply had no usable code; nothing was evaluated)"


def _previous_code(trajectory: Trajectory, index: int) -> tuple[int, str] | None:
    """The last earlier turn that had code: a diff against a turn without code would show everything."""
    for turn in reversed(trajectory.turns[:index]):
        if turn.code is not None:
            return turn.index, turn.code
    return None


def turn_view(trajectory: Trajectory, index: int) -> dict:
    """What the inspector shows for the turn at position `index` (from 0, as Turn.index): "title", "code",
    "diff" (unified, against the last earlier turn with code; "" on the first turn), "feedback", "metrics"
    (a dict), "kernels" (profiler.format_kernel_table) and "bottleneck"."""
    n = len(trajectory.turns)
    head = f"{trajectory.task} · sample {trajectory.sample}"
    if not 0 <= index < n:
        return {"title": f"{head} · no turn {index + 1} (the trajectory has {n})", "code": "", "diff": "",
                "feedback": "", "metrics": {}, "kernels": "", "bottleneck": ""}
    turn = trajectory.turns[index]
    result = turn.result
    diff = ""
    previous = _previous_code(trajectory, index)
    if previous is not None and turn.code is not None:
        before, code = previous
        diff = "\n".join(difflib.unified_diff(code.splitlines(), turn.code.splitlines(), f"turn {before + 1}",
                                              f"turn {index + 1}", lineterm=""))
    metrics = {"correct": result.correct, "hacked": result.hacked, "hack_reasons": list(result.hack_reasons),
               "error_kind": result.error_kind, "speedup": result.speedup, "speedup_compile": result.speedup_compile,
               "coverage": result.coverage, "bandwidth_fraction": result.bandwidth_fraction,
               "runtime_ms": result.runtime_ms, "reward": turn.reward, "extraction": turn.extraction}
    return {"title": f"{head} · turn {index + 1} of {n}", "code": turn.code if turn.code is not None else NO_CODE,
            "diff": diff, "feedback": turn.feedback, "metrics": metrics,
            "kernels": format_kernel_table(result.kernels), "bottleneck": result.bottleneck or ""}


def _format(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def _diff_html(diff: str) -> str:
    colors = {"+": "#1a7f37", "-": "#cf222e", "@": "#8250df"}
    lines = []
    for line in diff.splitlines():
        color = None if line.startswith(("+++", "---")) else colors.get(line[:1])
        text = html_lib.escape(line)
        lines.append(f'<span style="color:{color}">{text}</span>' if color else text)
    return "\n".join(lines)


PRE = 'style="white-space:pre-wrap;font-size:12px;background:#f6f8fa;padding:6px;max-height:420px;overflow:auto"'


def render_html(view: dict) -> str:
    """The view as HTML in a <div class="drk-turn">; its <h4 class="drk-turn-title"> holds the title
    ("... turn 3 of 3"), a marker for browser tests. Everything from the model is escaped."""
    esc = html_lib.escape
    cells = "".join(f"<tr><td>{esc(k)}</td><td><b>{esc(_format(v))}</b></td></tr>" for k, v in view["metrics"].items())
    diff = (f'<pre class="drk-diff" {PRE}>{_diff_html(view["diff"])}</pre>' if view["diff"]
            else "<p><i>no diff (first turn, or no code to compare)</i></p>")
    kernels = view["kernels"] + ("\n" + view["bottleneck"] if view["bottleneck"] else "")
    parts = [
        '<div class="drk-turn">',
        f'<h4 class="drk-turn-title">{esc(view["title"])}</h4>',
        f'<table class="drk-metrics">{cells}</table>',
        f'<details open><summary>feedback</summary><pre class="drk-feedback" {PRE}>{esc(view["feedback"])}</pre>',
        "</details>",
        f"<details open><summary>diff</summary>{diff}</details>",
        f'<details><summary>code</summary><pre class="drk-code" {PRE}>{esc(view["code"])}</pre></details>',
        f'<details><summary>kernels</summary><pre class="drk-kernels" {PRE}>{esc(kernels)}</pre></details>',
        "</div>",
    ]
    return "\n".join(parts)


def turn_figure(trajectory: Trajectory, index: int) -> go.Figure:
    """Speedup, coverage and reward across the trajectory's turns, the turn at `index` marked."""
    fig = turn_chart([trajectory], leave_out_flat=False)
    fig.add_vline(x=index + 1, line_dash="dot", line_color="red", row="all", col=1)
    fig.update_layout(title=f"turn {index + 1} of {len(trajectory.turns)}", height=480, showlegend=False,
                      margin={"t": 60, "b": 30})
    return fig


class TurnInspector:
    """Task and sample dropdowns, a turn slider (from 1) with a Play button, the turn's HTML and a chart.
    It opens on the first trajectory at `first_turn` (None: its last turn; Play then starts from turn 1).

    Attributes tests and notebooks use: task, sample (value: the position of the trajectory in
    `trajectories`), turn, play, html (widgets.HTML), plot (widgets.Output), figure (the last go.Figure
    drawn), widget (the whole box), trajectory (the one shown) and view (its turn_view)."""

    def __init__(self, trajectories: list[Trajectory], first_turn: int | None = None):
        if not trajectories:
            raise ValueError("TurnInspector needs at least one trajectory")
        self.trajectories = list(trajectories)
        self._busy = False
        tasks = list(dict.fromkeys(t.task for t in self.trajectories))
        self.task = widgets.Dropdown(options=tasks, value=tasks[0], description="task")
        self.sample = widgets.Dropdown(options=self._sample_options(tasks[0]), description="sample")
        self.turn = widgets.IntSlider(value=1, min=1, max=1, description="turn", continuous_update=True)
        self.play = widgets.Play(value=1, min=1, max=1, interval=1500, description="play the turns")
        widgets.jslink((self.play, "value"), (self.turn, "value"))  # in the browser; Python sets turn directly
        self.html = widgets.HTML()
        self.plot = widgets.Output()
        self.figure: go.Figure | None = None
        self.view: dict = {}
        self.widget = widgets.VBox([widgets.HBox([self.task, self.sample]), widgets.HBox([self.play, self.turn]),
                                    widgets.HBox([self.html, self.plot])])
        self.html.layout.width = "55%"
        self.plot.layout.width = "45%"
        self.task.observe(self._on_task, names="value")
        self.sample.observe(self._on_sample, names="value")
        self.turn.observe(lambda change: self._render(), names="value")
        self._on_sample(turn=first_turn or 1)  # the first turn: play steps through the rest

    @classmethod
    def from_jsonl(cls, path: str | Path) -> TurnInspector:
        return cls(read_jsonl(path))

    def _sample_options(self, task: str) -> list[tuple[str, int]]:
        seen: dict[int, int] = {}
        options = []
        for i, t in enumerate(self.trajectories):
            if t.task == task:
                seen[t.sample] = seen.get(t.sample, 0) + 1
                # The same sample can appear again (another step or epoch in a training log).
                suffix = f" ({seen[t.sample]})" if seen[t.sample] > 1 else ""
                options.append((f"sample {t.sample}{suffix} · {len(t.turns)} turns", i))
        return options

    @contextmanager
    def _quiet(self):
        # Changing options fires several observers; render once, after all of them.
        self._busy = True
        try:
            yield
        finally:
            self._busy = False

    @property
    def trajectory(self) -> Trajectory:
        return self.trajectories[self.sample.value]

    def _on_task(self, change=None) -> None:
        with self._quiet():
            options = self._sample_options(self.task.value)
            self.sample.options = options
            self.sample.value = options[0][1]
        self._on_sample()

    def _on_sample(self, change=None, turn: int | None = None) -> None:
        if self._busy:
            return
        n = max(1, len(self.trajectory.turns))
        with self._quiet():
            self.turn.max = self.play.max = n
            self.turn.value = self.play.value = max(1, min(turn or self.turn.value, n))
        self._render()

    def _render(self) -> None:
        if self._busy:
            return
        index = self.turn.value - 1
        self.view = turn_view(self.trajectory, index)
        self.html.value = render_html(self.view)
        self.figure = turn_figure(self.trajectory, index)
        self.plot.outputs = figure_output(self.figure)

    def _repr_mimebundle_(self, **kwargs):
        # The widget for a live kernel; a text line for outputs read without one (papermill, nbconvert).
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = f"TurnInspector of {len(self.trajectories)} trajectories: {self.view['title']}"
        return bundle

    def display(self) -> None:
        from IPython.display import display

        display(self.widget)
