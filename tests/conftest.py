import atexit
import os
import shutil
import tempfile

import pytest

# Baselines and Triton's cache go to a private folder, never the user's ~/.cache; a pytest-xdist worker
# makes its own rather than share the controller's (tests fill the cache and read it back).
cache = os.environ.get("DRK_CACHE_DIR")
if cache is None or os.path.basename(cache).startswith("drk_test_cache_"):
    os.environ["DRK_CACHE_DIR"] = tempfile.mkdtemp(prefix="drk_test_cache_")
    atexit.register(shutil.rmtree, os.environ["DRK_CACHE_DIR"], ignore_errors=True)  # nothing left behind
# Workers' folders too (tests check that each is removed): other runs on the machine cannot mix in. An
# xdist worker inherits the controller's folder and makes its own beside it, not inside: Ray's socket paths
# under a nested folder pass the 107 bytes an AF_UNIX path may have.
inherited = os.environ.get("TMPDIR", "")
beside = os.path.dirname(inherited) if os.path.basename(inherited).startswith("drk_test_tmp_") else None
os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="drk_test_tmp_", dir=beside)
tempfile.tempdir = None  # gettempdir() reads TMPDIR again
atexit.register(shutil.rmtree, os.environ["TMPDIR"], ignore_errors=True)
# One OpenMP thread per process (subprocesses inherit it): with two pytest processes on two cores, torch's
# intra-op threads spin-waiting beside the other process's took half of the CPU time of the RL tests.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


# The longest files first: under `-n 2 --dist loadfile` a file runs whole on one worker, and one of
# several minutes taken last would leave the other worker idle at the end.
LONGEST_FILES = ("test_mini.py", "test_notebooks.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in LONGEST_FILES)  # stable: the rest keep their order
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tasks():
    import drk_lab as drk

    return {f"level{t.level}/{t.name}": t for t in drk.builtin_tasks()}


@pytest.fixture(scope="session")
def relu_small(tasks):
    return tasks["level1/01_relu"].small()


@pytest.fixture(scope="session")
def relu_solution(tasks):
    import drk_lab as drk

    return drk.builtin_solution(tasks["level1/01_relu"])


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    """A tiny random Qwen3-style model and its tokenizer, saved once; load it per module (training changes it)."""
    pytest.importorskip("transformers")
    from drk_lab.rl.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
