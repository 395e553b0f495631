"""Seeing results: plotly charts, the turn inspector (ipywidgets) and live training tables, for the
notebooks and the command line.

Owns: plots (speedups, turns, run-log curves, distributions; figures saved as PNG and HTML to
runs/figures/, which git ignores; experiments/figures.py draws the committed ones), about (what a figure
is of: a run folder's header, its model; an entropy near uniform), inspector (step through a trajectory
turn by turn: code, diff, feedback, metrics), live (a table and curves that update as training steps
finish).

May import: drk_lab.agent, drk_lab.harness, drk_lab.hacks and drk_lab.rl (results, trajectories and
run logs), plotly and ipywidgets. Nothing in the library imports viz: only notebooks and the command line.
"""
