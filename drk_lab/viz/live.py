"""Live training progress: a table of the last steps and curves that redraw as steps finish.

    live = LiveTable(["reward_mean", "entropy", "grad_norm"], rollouts=log_dir + "/rollouts", groups_every=5)
    trainer.train(num_steps, on_step=live.callback)

With `rollouts` (the trainer's log_dir/rollouts) every `groups_every` steps also shows that step's
sampled completions per group, turn by turn, with their rewards.

In a notebook (an IPython kernel) each update replaces one HTML table and one plotly figure in place
(IPython display handles); anywhere else (a script, a terminal) it prints one compact line per update.
"""

from __future__ import annotations

import html as html_lib
from pathlib import Path

from drk_lab.agent.trajectory import read_jsonl
from drk_lab.viz.plots import figure_output, run_curves
from drk_lab.viz.tables import groups_frame


def in_notebook() -> bool:
    """True inside an IPython kernel (Jupyter, VS Code), where rich output is drawn."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class LiveTable:
    """Collects step rows; every `every` rows it redraws a table of the last `last` rows (step and `keys`)
    and run_curves of `keys`, or prints a line outside a notebook.

    display: a function like IPython.display.display, called as display(table_bundle, raw=True,
    display_id=True) (returning a handle with .update(bundle, raw=True)) and display(output_widget);
    None picks IPython's inside a notebook, and printing elsewhere."""

    def __init__(self, keys, every: int = 1, last: int = 8, smooth: float = 0.6, display=None,
                 rollouts: str | Path | None = None, groups_every: int = 0):
        self.keys = list(keys)
        self.rollouts, self.groups_every = rollouts, groups_every
        self.every = max(1, int(every))
        self.last = last
        self.smooth = smooth
        self.rows: list[dict] = []
        if display is None and in_notebook():
            from IPython.display import display
        self._display = display
        self._table = None  # the table's display handle, once shown
        self.plot = None  # the figure's ipywidgets Output, once shown

    def update(self, row: dict) -> None:
        self.rows.append(dict(row))
        step = row.get("step", len(self.rows))
        if self.rollouts and self.groups_every and step % self.groups_every == 0:
            self.show_groups(step)
        if len(self.rows) % self.every:
            return
        if self._display is None:
            print(self.line(row), flush=True)
        else:
            self._draw()

    def show_groups(self, step: int) -> None:
        """The step's sampled completions per group (the trainer's rollouts file for that step)."""
        files = sorted(Path(self.rollouts).glob(f"step_{step:06d}*.jsonl"))
        frame = groups_frame([t for f in files for t in read_jsonl(f)])
        if self._display is None:
            print(f"step {step}: sampled completions\n{frame.to_string(index=False)}", flush=True)
        else:
            self._display(frame)

    # The trainer's on_step hook calls this with each step's row.
    callback = update

    def line(self, row: dict) -> str:
        """One compact line: 'step 3 | reward_mean 0.25 | entropy 1.2'."""
        step = row.get("step", len(self.rows))
        return " | ".join([f"step {step}"] + [f"{k} {_cell(row.get(k))}" for k in self.keys])

    def table_html(self) -> str:
        """The last `last` rows as an HTML table."""
        columns = ["step"] + self.keys
        head = "".join(f"<th>{html_lib.escape(c)}</th>" for c in columns)
        body = "".join("<tr>" + "".join(f"<td>{html_lib.escape(_cell(row.get(c)))}</td>" for c in columns) + "</tr>"
                       for row in self.rows[-self.last:])
        return f'<table class="drk-live"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'

    def figure(self):
        fig = run_curves(self.rows, self.keys, smooth=self.smooth, leave_out_flat=False)
        fig.update_layout(title=f"Training curves, {len(self.rows)} steps")
        return fig

    def _draw(self) -> None:
        table = {"text/html": self.table_html(), "text/plain": self.line(self.rows[-1])}
        if self.plot is None:
            import ipywidgets

            # The table is a display handle, updated in place (its text stays in saved notebooks); the
            # figure lives in an Output widget, since plotly's renderer ignores display updates.
            self._table = self._display(table, raw=True, display_id=True)
            self.plot = ipywidgets.Output()
            self._display(self.plot)
        else:
            self._table.update(table, raw=True)
        self.plot.outputs = figure_output(self.figure())
