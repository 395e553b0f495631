"""Plotly figures of results, trajectories and run logs, and save_figure (HTML always, PNG when it can).

    fig = speedup_chart([("relu", result), ("gelu", other)])
    save_figure(fig, "speedups")                   # runs/figures/speedups.html and .png (ignored by git)

Every function returns a plotly.graph_objects.Figure; show it by leaving it last in a notebook cell.
Speedups count only when the kernel is correct, not hacked and timed (agent.metrics.valid_speedup): a
hacked kernel's speedup means nothing, and an untimed one (CPU runs) is a note, never a zero.
"""

from __future__ import annotations

import math
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from drk_lab.agent.metrics import DEFAULT_PS, p_label, valid_speedup
from drk_lab.harness.task import in_repo
from drk_lab.rl import diagnostics

COLORS = qualitative.Plotly


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _field(result, name: str):
    return result.get(name) if isinstance(result, dict) else getattr(result, name, None)


def why_untimed(result) -> str:
    """A few words on why a result has no valid speedup."""
    if result is None:
        return "no result"
    if _field(result, "hacked"):
        return "hacked: " + ",".join(_field(result, "hack_reasons") or [])
    if _field(result, "error_kind"):
        return _field(result, "error_kind")
    if not _field(result, "correct"):
        return "not correct"
    if _field(result, "device") == "cpu":
        return "no timings on the CPU"
    note = _field(result, "timing_note") or "no timings"
    return note if len(note) <= 60 else note[:57] + "..."


def _titled(title: str, note: str | None, width: int = 110) -> str:
    """The title with a subtitle under it, long subtitles in several lines (_wrap)."""
    return title + "".join(f"<br><sup>{piece}</sup>" for piece in _wrap(note, width)) if note else title


def about_line(run=None, model=None, card=None, baseline=None, n=None) -> str:
    """What a figure shows, in one subtitle line: "run R · model M · card C · baseline B · n N" (the parts
    given; the index of figures and the README captions use the same words)."""
    parts = [("run", run), ("model", model), ("card", card), ("baseline", baseline), ("n", n)]
    return " · ".join(f"{name} {value}" for name, value in parts if value not in (None, ""))


def _wrap(line: str, width: int) -> list[str]:
    """A long subtitle line in pieces of at most about `width` characters, broken at " · ", then "; ", then ", "."""
    if len(line) <= width:
        return [line]
    for sep in (" · ", "; ", ", "):
        parts = line.split(sep)
        if len(parts) == 1:
            continue
        out = [parts[0]]
        for part in parts[1:]:
            if len(out[-1]) + len(sep) + len(part) <= width:
                out[-1] += sep + part
            else:
                out.append(part)
        return out if sep == ", " else [piece for p in out for piece in _wrap(p, width)]
    return [line]


def describe(fig: go.Figure, *lines: str, width: int = 110) -> go.Figure:
    """Adds subtitle lines under the figure's title (about_line's, or any other; long ones wrapped at about
    `width` characters) and room for them."""
    lines = [piece for line in lines if line for piece in _wrap(line, width)]
    if lines:
        text = (fig.layout.title.text or "") + "".join(f"<br><sup>{x}</sup>" for x in lines)
        fig.update_layout(title_text=text, margin_t=70 + 22 * text.count("<br>"), title_y=1.0, title_yanchor="top",
                          title_pad_t=16)
    return fig


def _flat(values) -> bool:
    """No values, or all the same: a panel with nothing to read in it."""
    values = [v for v in values if v is not None]
    return not values or max(values) - min(values) <= 1e-12 * max(1.0, abs(values[0]))


def speedup_chart(rows) -> go.Figure:
    """Grouped bars of speedup vs eager PyTorch and vs torch.compile, one group per (label, EvalResult);
    results without a valid speedup are listed in the subtitle instead of drawn as zeros."""
    timed = [(label, r) for label, r in rows if valid_speedup(r) is not None]
    untimed = [(label, r) for label, r in rows if valid_speedup(r) is None]
    labels = [label for label, _ in timed]
    fig = go.Figure()
    for name, key in (("vs eager", "speedup"), ("vs torch.compile", "speedup_compile")):
        values = [valid_speedup(r, key) for _, r in timed]
        fig.add_bar(name=name, x=labels, y=values, text=[f"{v:.2f}x" if v else "" for v in values])
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray")
    note = None
    if untimed:
        reasons = sorted({why_untimed(r) for _, r in untimed})
        names = [str(label) for label, _ in untimed]
        names = names if len(names) <= 8 else names[:8] + [f"and {len(names) - 8} more"]
        note = f"{len(untimed)} without timings ({'; '.join(reasons[:4])}): " + ", ".join(names)
    fig.update_layout(title=_titled("Speedup (baseline = 1.0)", note), barmode="group", yaxis_title="speedup",
                      legend_title=None)
    return fig


def _turn_value(turn, metric: str):
    if metric == "reward":
        return turn.reward
    if metric in ("speedup", "speedup_compile"):
        return valid_speedup(turn.result, metric)
    return _field(turn.result, metric)


def turn_chart(trajectories, metrics=("speedup", "coverage", "reward"), leave_out_flat: bool = True) -> go.Figure:
    """One line per trajectory ("task#sample") across its turns, one subplot per metric ("reward" or any
    EvalResult field; speedups only where valid, so failed turns are gaps). A metric with no values, or with
    one value in every turn of every trajectory (a single trajectory's coverage of 1.0), gets no subplot: the
    subtitle names it and its value (unless leave_out_flat is False: the inspector keeps its panels)."""
    left_out, drawn = [], []
    for metric in metrics:
        values = [v for traj in trajectories for v in (_turn_value(t, metric) for t in traj.turns) if v is not None]
        if not leave_out_flat or not _flat(values):
            drawn.append(metric)
        else:
            left_out.append(f"{metric} {values[0]:.3g} in every turn" if values else f"{metric} (none)")
    metrics = drawn or list(metrics)[:1]
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, subplot_titles=list(metrics),
                        vertical_spacing=0.08)
    for i, traj in enumerate(trajectories):
        turns = [t.index + 1 for t in traj.turns]
        for row, metric in enumerate(metrics, start=1):
            fig.add_scatter(x=turns, y=[_turn_value(t, metric) for t in traj.turns], mode="lines+markers",
                            name=f"{traj.task}#{traj.sample}", legendgroup=f"{i}", showlegend=row == 1,
                            line_color=_color(i), row=row, col=1)
    fig.update_xaxes(title_text="turn", dtick=1, row=len(metrics), col=1)
    note = f"not drawn: {'; '.join(left_out)}" if left_out else None
    fig.update_layout(title=_titled("Per-turn metrics", note), height=max(300, 220 * len(metrics)))
    return fig


def _grid(keys) -> tuple[go.Figure, list[tuple[int, int]]]:
    cols = 1 if len(keys) == 1 else 2
    n_rows = math.ceil(len(keys) / cols)
    fig = make_subplots(rows=n_rows, cols=cols, subplot_titles=list(keys), vertical_spacing=0.3 / max(n_rows, 1))
    fig.update_layout(height=max(320, 260 * n_rows))
    return fig, [(i // cols + 1, i % cols + 1) for i in range(len(keys))]


def _add_curve(fig, rows, key, place, color, name, smooth, showlegend) -> int:
    steps, values = diagnostics.series(rows, key)
    if not values:
        return 0
    r, c = place
    # Raw points faint, the moving average on top: noise stays visible but does not hide the trend.
    fig.add_scatter(x=steps, y=values, mode="markers+lines", name=f"{name} (raw)", legendgroup=name,
                    showlegend=False, opacity=0.25, line_color=color, marker_size=4, row=r, col=c)
    fig.add_scatter(x=steps, y=diagnostics.smooth(values, smooth), mode="lines", name=name, legendgroup=name,
                    showlegend=showlegend, line_color=color, row=r, col=c)
    return len(values)


def run_curves(rows: list[dict], keys, smooth: float = 0.6, leave_out_flat: bool = True) -> go.Figure:
    """Run-log rows -> one subplot per key: raw points faint and their exponential moving average
    (diagnostics.smooth with alpha=smooth). Keys the log lacks, or that never change, as compare_runs."""
    return compare_runs({"run": rows}, keys, smooth, title="Training curves", leave_out_flat=leave_out_flat)


def compare_runs(runs: dict, keys, smooth: float = 0.6, title: str = "Runs compared",
                 leave_out_flat: bool = True) -> go.Figure:
    """Several runs ({name: run-log rows}) on the same subplots, one color per run (ablations). Keys that no
    run logged, or that stay at one value in every run (a filter that never fired), get no subplot: the
    subtitle names them. With leave_out_flat=False (live curves, filling step by step) every key keeps its
    panel, "(no data)" in the title of those with none yet."""
    keys = list(keys)
    no_data = [k for k in keys if not any(diagnostics.series(rows, k)[1] for rows in runs.values())]
    flat = [k for k in keys if k not in no_data and
            _flat([v for rows in runs.values() for v in diagnostics.series(rows, k)[1]])]
    if not leave_out_flat:
        flat = []
    drawn = [k for k in keys if k not in flat and (k not in no_data or not leave_out_flat)] or keys[:1]
    fig, places = _grid(drawn)
    for i, (name, rows) in enumerate(runs.items()):
        for k, (key, place) in enumerate(zip(drawn, places)):
            _add_curve(fig, rows, key, place, _color(i), name, smooth, showlegend=k == 0 and len(runs) > 1)
    for annotation in fig.layout.annotations:
        if annotation.text in no_data:
            annotation.text += " (no data)"
    constant = {k: next(v for rows in runs.values() for v in diagnostics.series(rows, k)[1]) for k in flat}
    left_out = [f"{k} (always {v:.3g})" for k, v in constant.items()] + \
        [f"{k} (not logged)" for k in no_data if k not in drawn]
    fig.update_xaxes(title_text="step")
    fig.update_layout(title=_titled(title, f"faint: raw, line: moving average (smooth={smooth:g})"))
    return describe(fig, f"not drawn: {', '.join(left_out)}" if left_out else "")


def speedup_histogram(results, key: str = "speedup", bins: int = 30) -> go.Figure:
    """Distribution of valid speedups on a log axis (bars are log10 of the speedup, ticks in "x"); the
    failed, hacked and untimed results are counted in the title."""
    results = list(results)
    values = [v for v in (valid_speedup(r, key) for r in results) if v is not None]
    missing = len(results) - len(values)
    fig = go.Figure()
    # Binned in log10 space so that 0.5x and 2x are equally far from 1x (plotly bins linearly).
    fig.add_histogram(x=[math.log10(v) for v in values], customdata=values, nbinsx=bins, name=key,
                      hovertemplate="%{y} kernels<extra></extra>")
    fig.add_vline(x=0.0, line_dash="dash", line_color="gray")
    lo = math.floor(math.log2(min(values))) if values else -1
    hi = math.ceil(math.log2(max(values))) if values else 1
    ticks = [2.0**e for e in range(lo, hi + 1)]
    fig.update_xaxes(tickvals=[math.log10(t) for t in ticks], ticktext=[f"{t:g}x" for t in ticks],
                     title_text=f"{key} (log scale)")
    geomean = math.exp(sum(map(math.log, values)) / len(values)) if values else None
    note = f"{len(values)} timed" + (f", geomean {geomean:.2f}x" if geomean else "") + \
        f"; {missing} failed, hacked or untimed (not drawn)"
    fig.update_layout(title=_titled("Speedup distribution", note), yaxis_title="kernels", bargap=0.05)
    return fig


def fast_p_chart(table_rows: list[dict], ps=None) -> go.Figure:
    """Fast@p per turn from agent.metrics.fast_p_table: a solid line per p for that turn alone, dashed
    for the best over turns so far."""
    ps = ps or [p for p in DEFAULT_PS if table_rows and p_label(p) in table_rows[0]]
    turns = [row["turn"] for row in table_rows]
    fig = go.Figure()
    for i, p in enumerate(ps):
        label = p_label(p)
        fig.add_scatter(x=turns, y=[row.get(label) for row in table_rows], mode="lines+markers",
                        name=label.replace("fast@", "Fast@"), legendgroup=label, line_color=_color(i))
        if table_rows and "best_" + label in table_rows[0]:
            fig.add_scatter(x=turns, y=[row.get("best_" + label) for row in table_rows], mode="lines",
                            name="best " + label.replace("fast@", "Fast@"), legendgroup=label,
                            line={"color": _color(i), "dash": "dash"})
    n = table_rows[0]["tasks"] if table_rows and "tasks" in table_rows[0] else None
    fig.update_layout(title=_titled("Fast@p per turn", f"{n} tasks; dashed: best over turns so far" if n else None),
                      xaxis={"title": "turn", "dtick": 1},
                      yaxis={"title": "share of tasks", "tickformat": ".0%", "range": [0, 1.02]})
    return fig


def correct_chart(rows: list[dict], title: str = "Correct kernels per turn") -> go.Figure:
    """tables.correct_per_turn's rows: the share of episodes with a correct kernel at each turn (solid) and
    at some turn so far (dashed); on a CPU, where nothing is timed, what stands in for Fast@p."""
    turns = [row["turn"] for row in rows]
    fig = go.Figure()
    fig.add_scatter(x=turns, y=[row["correct"] for row in rows], mode="lines+markers", name="correct at this turn",
                    line_color=_color(0))
    fig.add_scatter(x=turns, y=[row["best_correct"] for row in rows], mode="lines", name="correct at some turn so far",
                    line={"color": _color(0), "dash": "dash"})
    fig.update_layout(title=title, xaxis={"title": "turn", "dtick": 1},
                      yaxis={"title": "share of episodes", "tickformat": ".0%", "range": [0, 1.02]})
    return fig


def outcome_chart(rows: list[dict], title: str = "How the replies ended") -> go.Figure:
    """Stacked bars, one per row ({"checkpoint": name, outcome: count, ...}, as mini_drkernel.outcome_rows
    gives them): each outcome's share of that checkpoint's replies, "correct" first."""
    kinds = sorted({k for row in rows for k in row if k != "checkpoint"}, key=lambda k: (k != "correct", k))
    names = [row["checkpoint"] for row in rows]
    totals = [sum(v for k, v in row.items() if k != "checkpoint") or 1 for row in rows]
    fig = go.Figure()
    for i, kind in enumerate(kinds):
        counts = [row.get(kind, 0) for row in rows]
        color = _color(i) if len(kinds) <= len(COLORS) else qualitative.Dark24[i % 24]  # no two kinds alike
        fig.add_bar(x=names, y=[c / t for c, t in zip(counts, totals)], name=kind, marker_color=color,
                    customdata=counts, hovertemplate=kind + ": %{customdata} (%{y:.0%})<extra></extra>")
    fig.update_layout(title=title, barmode="stack", yaxis={"title": "share of replies", "tickformat": ".0%"})
    return fig


def figure_bundle(fig: go.Figure) -> dict:
    """The figure as a raw MIME bundle (plotly's JSON MIME type, drawn by JupyterLab, Notebook 7 and VS
    Code), without going through plotly's display hook, which outside a notebook may open a browser."""
    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    title = fig.layout.title.text
    bundle["text/plain"] = f"<plotly figure: {title}>" if title else "<plotly figure>"
    return bundle


def plotly_script(folder: Path) -> str:
    """The src of the plotly.js an HTML figure in `folder` loads: in the repository, its one copy in
    figures/ (relative to the folder); elsewhere a copy beside the figure. Copied from the installed plotly
    the first time."""
    import os
    import shutil

    import plotly

    shared = in_repo("figures") / PLOTLY_JS
    if not folder.resolve().is_relative_to(in_repo(".").resolve()):
        shared = folder / PLOTLY_JS
    if not shared.is_file():
        shared.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(plotly.__file__).parent / "package_data" / PLOTLY_JS, shared)
    return os.path.relpath(shared, folder.resolve())


PLOTLY_JS = "plotly.min.js"


def figure_output(fig: go.Figure) -> tuple[dict]:
    """The figure as the `outputs` of an ipywidgets Output. Redrawing a figure means replacing these: the
    JupyterLab plotly renderer ignores update_display (plotly.py issue 3053), a new output is drawn anew.
    Setting outputs directly also works without a running kernel (tests)."""
    return ({"output_type": "display_data", "data": figure_bundle(fig), "metadata": {}},)


OUTPUT_DIR = "runs/figures"  # where notebooks' figures go: ignored by git, so re-running one leaves the tree clean


def save_figure(fig: go.Figure, name: str, folder: str | Path = OUTPUT_DIR) -> list[Path]:
    """Writes folder/name.html and folder/name.png (kaleido, which needs Chrome or Chromium); a relative
    folder is the repository's (notebooks run from notebooks/). The default, runs/figures/, is ignored by
    git; the committed figures (figures/, data/runs/*/figures/) are drawn by experiments/figures.py. The HTML loads plotly.js from the one copy in
    the repository's figures/ (written there once; outside the repository, a copy beside the file), so it
    shows offline, and its div id is the figure's name, so writing the same figure again changes nothing.
    When the PNG cannot be made it prints why and returns only the HTML path; it never raises for that. A
    `name` with a folder of its own (an absolute path) goes there."""
    folder = in_repo(folder)
    folder = (folder / name).parent
    name = Path(name).name
    folder.mkdir(parents=True, exist_ok=True)
    html = folder / f"{name}.html"
    fig.write_html(html, include_plotlyjs=plotly_script(folder), div_id=name)
    png = folder / f"{name}.png"
    try:
        fig.write_image(png, scale=2)
    except Exception as exc:  # noqa: BLE001 -- kaleido raises several types (no browser, failed start)
        print(f"save_figure: wrote {html} only; PNG export failed ({type(exc).__name__}: {str(exc)[:200]}). "
              "kaleido needs Chrome or Chromium (e.g. apt install chromium, or plotly_get_chrome).")
        return [html]
    return [html, png]
