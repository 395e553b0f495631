"""Experiment scripts beside the library (experiments/README.md); nothing in drk_lab imports them."""
