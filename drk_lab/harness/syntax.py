"""Syntax trees built one at a time, whatever thread asks.

CPython 3.11 keeps the depth counter of the code that turns a parse into `ast` objects in state shared by
every thread (python/cpython gh-106905): a thread switch in the middle of one parse (a garbage collection
running a finaliser is enough) lets a parse in another thread reset the counter, and one of them fails with
"SystemError: AST constructor recursion depth mismatch". The service parses in its request loop and in its
job threads at once, and evaluate_many and Ray actors evaluate in threads, so every ast.parse of the harness
goes through parse(). PARSE_LOCK is re-entrant: evaluate() holds it over the static checks, which parse too.
"""

from __future__ import annotations

import ast
import threading

PARSE_LOCK = threading.RLock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with PARSE_LOCK:
        return ast.parse(source, filename)
