"""Reference code from public data sets turned into KernelBench format, without running it.

KernelBench format (what drk_lab.harness.task loads): a top-level `class Model(nn.Module)`, `get_inputs()`
and `get_init_inputs()` returning the constructor's positional arguments. Public sets differ in two ways:

- the module class has its own name, given by the row's entry point (KernelBook: `class SumAggregator`);
  it is renamed `Model` everywhere it is used as a name (`super(SumAggregator, self)` too, but not an
  attribute such as `nn.Linear` when the entry point is `Linear`);
- `get_init_inputs()` returns KernelBook's pair `[args, kwargs]`; when that pair is a literal, the
  function is rewritten to return the positional arguments in the order of the constructor's parameters
  (defaults filled in where a later parameter is given), e.g. `[[], {'dim': 4}]` -> `[4]`.

Code that cannot be turned into that format raises NotKernelBench with a short reason (the loaders count
rows by it) and a detail. Nothing here executes the code; the loaders check the result with
drk_lab.harness.task.check_source.
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize


class NotKernelBench(Exception):
    """Code that cannot become a KernelBench-format task: `reason` is short and countable."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


# -- renaming ------------------------------------------------------------------------------------
def _name_tokens(code: str, name: str) -> list[tuple[int, int]]:
    """(line, column) of each use of `name` as a name: not after a dot (an attribute), not in strings."""
    found, previous = [], None
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.NAME and tok.string == name and not (previous and previous.string == "."):
            found.append(tok.start)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
            previous = tok
    return found


def rename(code: str, old: str, new: str) -> str:
    """`code` with every use of the name `old` replaced by `new` (attributes and strings left alone)."""
    if old == new:
        return code
    lines = io.StringIO(code).readlines()  # the same line split that tokenize sees
    for row, col in reversed(_name_tokens(code, old)):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old):]
    return "".join(lines)


def _parse(code: str) -> ast.Module:
    try:
        return ast.parse(code)
    except SyntaxError as e:
        raise NotKernelBench("syntax error", f"line {e.lineno}: {e.msg}") from None


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}


def renamed_class(code: str, old: str, new: str, what: str = "code") -> str:
    """`code` with its top-level class `old` renamed `new`; NotKernelBench when there is no such class or
    `new` is already used as a name there."""
    tree = _parse(code)
    if not isinstance(_top_level(tree).get(old), ast.ClassDef):
        raise NotKernelBench(f"{what} has no top-level class of the entry point", old)
    if old != new and _name_tokens(code, new):
        raise NotKernelBench(f"{what} already uses the name {new}", f"cannot rename {old}")
    return rename(code, old, new)


# -- get_init_inputs -----------------------------------------------------------------------------
def _literal_return(fn: ast.FunctionDef):
    """The value of a function whose body is `return <literal>` (after an optional docstring), else None."""
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    try:
        return ast.literal_eval(body[0].value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _positional(init: ast.FunctionDef | None, args: list, kwargs: dict) -> list[str]:
    """Source text of the constructor's positional arguments, from KernelBook's args and kwargs."""
    if init is None:
        if args or kwargs:
            raise NotKernelBench("constructor arguments are not positional", "Model has no __init__ of its own")
        return []
    spec = init.args
    params = [p.arg for p in spec.posonlyargs + spec.args]
    defaults = dict(zip(params[len(params) - len(spec.defaults):], spec.defaults))
    params = params[1:]  # self
    if len(args) > len(params) and spec.vararg is None:
        raise NotKernelBench("constructor arguments are not positional",
                             f"{len(args)} given, __init__ takes {len(params)}")
    values = [repr(v) for v in args]
    rest = params[len(args):]
    last = max((i for i, p in enumerate(rest) if p in kwargs), default=-1)
    for p in rest[: last + 1]:
        if p in kwargs:
            values.append(repr(kwargs.pop(p)))
        elif p in defaults:
            values.append(ast.unparse(defaults[p]))  # the default's own expression, in the module's namespace
        else:
            raise NotKernelBench("constructor arguments are not positional", f"no value for {p!r}")
    if kwargs:
        raise NotKernelBench("constructor arguments are not positional",
                             f"keyword-only or **kwargs arguments: {', '.join(map(repr, kwargs))}")
    return values


def positional_init_inputs(code: str) -> str:
    """`code` with a literal KernelBook `get_init_inputs()` ([args, kwargs]) rewritten to return positional
    arguments for `Model`; any other get_init_inputs() is left as it is."""
    tree = _parse(code)
    top = _top_level(tree)
    fn = top.get("get_init_inputs")
    value = _literal_return(fn) if isinstance(fn, ast.FunctionDef) else None
    if not (isinstance(value, (list, tuple)) and len(value) == 2 and isinstance(value[0], (list, tuple))
            and isinstance(value[1], dict)):
        return code
    model = top.get("Model")
    init = next((n for n in getattr(model, "body", []) if isinstance(n, ast.FunctionDef) and n.name == "__init__"),
                None)
    values = _positional(init, list(value[0]), dict(value[1]))
    lines = io.StringIO(code).readlines()
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list]) - 1
    new = ["def get_init_inputs():\n", f"    return [{', '.join(values)}]\n"]
    return "".join(lines[:start] + new + lines[fn.end_lineno:])


def kernelbench_source(code: str, entry_point: str | None = "Model") -> str:
    """A KernelBench-format reference from a public set's code and entry point (the class to become Model).

    NotKernelBench when the code does not parse, has no top-level class `entry_point`, lacks
    get_inputs()/get_init_inputs(), already uses the name Model otherwise, or gives constructor arguments
    that cannot be passed positionally.
    """
    code = code.replace("\r\n", "\n")
    code = renamed_class(code, entry_point or "Model", "Model", "the reference")
    top = _top_level(_parse(code))
    for fn in ("get_inputs", "get_init_inputs"):
        if not isinstance(top.get(fn), ast.FunctionDef):
            raise NotKernelBench(f"no top-level {fn}()")
    code = positional_init_inputs(code)
    return code if code.endswith("\n") else code + "\n"


# -- code in a chat message ----------------------------------------------------------------------
_FENCED = re.compile(r"^[ \t]*```[\w+.-]*[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)


def _parsed_block(block: str) -> tuple[str, ast.Module] | None:
    # Prompts built from templates often indent the fence and the first line of the code only.
    for code in (block.strip() + "\n", textwrap.dedent(block)):
        try:
            return code, ast.parse(code)
        except SyntaxError:
            continue
    return None


def reference_in_message(text: str, entry_point: str | None = "Model") -> str | None:
    """The reference code of a task prompt: the last fenced block that parses and defines the class
    `entry_point` and get_inputs() (Dr. Kernel's prompt shows an example architecture before the task's)."""
    for block in reversed(_FENCED.findall(text)):
        parsed = _parsed_block(block)
        if parsed is None:
            continue
        top = _top_level(parsed[1])
        if isinstance(top.get(entry_point or "Model"), ast.ClassDef) and "get_inputs" in top:
            return parsed[0]
    return None
