"""The mini Dr. Kernel run: settings (and config/ recipes), texts, model, run.py, report."""
