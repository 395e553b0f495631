"""The package's shape: no import circle, no module importing from a package above its own (LAYERS), small
modules, and every name written as a string (watched modules, hack-code emitters, the entry point)
resolves, so that a rename cannot silently switch a check off."""

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

import drk_lab
from drk_lab.hacks.catalogue import ERROR_KINDS, HACK_CODES
from drk_lab.hacks.runtime_checks import WATCHED_MODULES, resolve
from drk_lab.harness import stages
from drk_lab.harness.entry import COMMAND
from drk_lab.harness.result import ERROR_KINDS as RESULT_KINDS
from drk_lab.harness.task import DATA_DIR

ROOT = Path(drk_lab.__file__).parent
MODULES = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p
           for p in sorted(ROOT.rglob("*.py"))}
MAX_LINES = 400
# The packages from the bottom up. A module imports its own package and those below it, never one above:
# what the harness and the hack checks both measure with sits under both (common), the checks under the
# harness that runs them, the service beside the harness (above it: it runs the local evaluator), then one
# episode, the policies, the data sets, training, and what only sits on top (integrations, viz, the
# command line and the public API in drk_lab/*.py). Each package's __init__ docstring says the same.
LAYERS = ("drk_lab.common", "drk_lab.hacks", "drk_lab.harness", "drk_lab.service", "drk_lab.agent",
          "drk_lab.policies", "drk_lab.data", "drk_lab.rl", "drk_lab.integrations", "drk_lab.viz", "drk_lab")


def imports_of(name: str) -> set[str]:
    """drk_lab modules that `name` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("drk_lab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("drk_lab"):
            for a in node.names:  # `from pkg import module` imports the module; `from module import name` the module
                found.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (MODULES.get(module, Path()).name == "__init__.py") else "drk_lab"


def test_every_import_names_a_module_of_the_package():
    assert {m for targets in GRAPH.values() for m in targets} <= set(MODULES)


def test_no_import_circle():
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == "open":
                raise AssertionError("import circle: " + " -> ".join(path[path.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = "done"

    for module in MODULES:
        if module not in state:
            visit(module, [])


def test_every_package_has_its_layer():
    assert {package_of(m) for m in MODULES} == set(LAYERS)


@pytest.mark.parametrize("package", LAYERS)
def test_no_module_imports_from_a_package_above_its_own(package):
    below = LAYERS[: LAYERS.index(package) + 1]
    for module, targets in GRAPH.items():
        if package_of(module) == package:
            above = sorted(t for t in targets if package_of(t) not in below)
            assert not above, f"{module} imports {above}, above {package}"


@pytest.mark.parametrize("package", LAYERS[:-1])
def test_each_package_says_what_it_owns_and_may_import(package):
    doc = importlib.import_module(package).__doc__ or ""
    assert len(doc) > 200 and "May import" in doc, package


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = MODULES[module].read_text().count("\n")
    assert lines <= MAX_LINES, f"{module} has {lines} lines"


@pytest.mark.parametrize("dotted", WATCHED_MODULES + (stages.__name__,))
def test_every_watched_module_resolves(dotted):
    obj = resolve(dotted)
    assert [name for name, value in vars(obj).items() if callable(value)], dotted


def test_the_entry_point_names_a_module_with_main():
    module = re.search(r"from (\S+) import main", COMMAND[-1]).group(1)
    assert callable(importlib.import_module(module).main)


def emitter(spec: str):
    module, _, attr = spec.partition(":")
    obj = importlib.import_module("drk_lab." + module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("code", sorted(HACK_CODES))
def test_every_hack_code_has_a_check_that_emits_it(code):
    entry = HACK_CODES[code]
    assert entry.emitters and entry.feedback
    for spec in entry.emitters:
        obj = emitter(spec)
        if isinstance(obj, dict):  # a name table: some entry maps to the code
            assert code in {value[0] for value in obj.values()}, spec
        else:
            assert f'"{code}"' in inspect.getsource(obj), f"{spec} does not mention {code}"


def test_every_planted_cheat_names_a_code_of_the_catalogue():
    for path in sorted((DATA_DIR / "hacks").glob("*.py")):
        reason = re.search(r"^# reason: (\S+)", path.read_text(), re.M).group(1)
        assert reason in HACK_CODES and path.stem.split("__")[0] == reason, path.name


def test_error_kinds_come_from_the_catalogue():
    assert RESULT_KINDS == tuple(ERROR_KINDS) and all(k.feedback for k in ERROR_KINDS.values())


def test_the_public_names_users_rely_on_stay_importable():
    import drk_lab as drk
    from drk_lab.metrics import fast_p
    from drk_lab.reward import get_reward
    from drk_lab.rl.advantages import grpo_multiturn, trloo
    from drk_lab.rl.filters import mismatch_rejection, profiling_rejection

    for name in ("evaluate", "evaluate_many", "load_task", "load_tasks", "builtin_tasks", "KernelEnv", "EvalResult",
                 "configure", "shutdown"):
        assert callable(getattr(drk, name)), name
    assert all(callable(f) for f in (fast_p, get_reward, grpo_multiturn, trloo, mismatch_rejection,
                                     profiling_rejection))


def test_only_the_public_api_and_the_command_line_reach_the_service():
    """The service sits beside the harness: no package below it (or beside it) imports it, so the local
    evaluator never knows it exists and `import drk_lab` needs neither FastAPI nor Ray. The integrations
    sit above it like the command line (verl's reward function is a client of the service, and nothing in
    drk_lab imports them), so they may; the environment reaches only `backends`, which picks the evaluator
    a `backend=` names."""
    for module, targets in GRAPH.items():
        if package_of(module) not in ("drk_lab.service", "drk_lab", "drk_lab.integrations"):
            reached = {t for t in targets if package_of(t) == "drk_lab.service"}
            assert reached <= ({"drk_lab.service.backends"} if module == "drk_lab.agent.env" else set()), module
    import subprocess
    import sys

    check = "import sys, drk_lab, drk_lab.cli; print(sorted({'fastapi', 'uvicorn', 'ray', 'httpx'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_nothing_but_the_command_line_imports_viz():
    """Plots and widgets read results and logs; the library never depends on them."""
    for module, targets in GRAPH.items():
        if package_of(module) not in ("drk_lab.viz", "drk_lab"):
            assert not any(package_of(t) == "drk_lab.viz" for t in targets), module


def test_the_docs_hack_table_is_the_catalogues():
    """docs/hacks.md lists every code with its sentence, emitters and plants, as the catalogue has them."""
    doc = (ROOT.parent / "docs" / "hacks.md").read_text()
    plants: dict[str, list[str]] = {}
    for path in sorted((DATA_DIR / "hacks").glob("*.py")):
        header = dict(re.findall(r"^# (\w+): (.+)$", path.read_text(), flags=re.M))
        plants.setdefault(header["reason"], []).append(f"`{path.name}` ({header.get('check')})")
    for code, entry in HACK_CODES.items():
        emitters = ", ".join(f"`{e}`" for e in entry.emitters)
        assert f"| `{code}` | {entry.feedback} | {emitters} | {', '.join(plants.get(code, []))} |" in doc, code
