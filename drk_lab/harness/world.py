"""What a candidate could change in place: the contents of everything mutable that the process's modules
reach, and the registries torch keeps outside any module attribute.

`Contents` is taken once in a warm worker, before its first job. It walks every module in `sys.modules`
(all of them: a patched `json.encoder` would forge later reports as surely as a patched `torch`) and
records, for each mutable object it reaches within `MAX_DEPTH` hops of a module attribute, what that
object holds: a dict's keys and values, a list's, set's or deque's items, a class's or an instance's
attributes, a function's code, defaults, attributes and closure cells, the class of every module and
instance, a bytearray's bytes. Slots are compared by identity: an equal copy put in place of a trusted
object counts as a change. Every object a job leaves behind hangs from one of those slots, so comparing
them finds it; what sits deeper than MAX_DEPTH, or inside C objects, is out of sight.

Honest jobs fill a few caches (the regular-expression cache, the import system's, the warning
registries, Triton's per-function compile caches): `RESTORED` and `RESTORED_CLASSES` name them, and
`restore()` puts them back as they were instead of retiring the worker for it. Everything else that differs retires the worker.

What lives outside module attributes (torch's dispatcher, autocast, ...) is read by registries.py.

The comparison runs C-level passes over flat lists of what the objects hold (per kind of object, in chunks of
CHUNK objects), compared by identity; only in a chunk whose pass differs does it look for which object changed.
"""

from __future__ import annotations

import collections
import functools
import operator
import os
import sys
import threading
import types
import weakref
from itertools import chain, repeat

MAX_DEPTH = 4
CHUNK = 256  # objects per pass chunk (see Contents.refreshed)
# caches that honest jobs fill, put back as they were after each job: (module, attribute) of a dict, list
# or set, "*" for that attribute in every module. Each holds what its own code recomputes on a miss.
RESTORED = {
    ("*", "__warningregistry__"),  # which warnings a module has printed
    ("re", "_cache"), ("re", "_cache2"),  # compiled patterns
    ("sys", "path_importer_cache"),  # the import system's finders (the job's folder among them)
    ("linecache", "cache"),  # source lines of the job's files, for tracebacks
    ("triton.runtime.jit", "_triton_jit_function_registry"),  # every @triton.jit function by name (the job's)
    ("triton.knobs", "runtime"),  # the compile hooks the GPU lock sets around each job's compiles
    ("*", "_lazy_seed_tracker"),  # each device module's record of the last manual_seed call
}
# objects of these classes keep caches in their attribute dicts that honest jobs fill (a Triton library
# function such as tl.sum caches its hash and the globals it read when a kernel first calls it): put back
RESTORED_CLASSES = {"triton.runtime.jit.JITFunction"}
# Triton's CPU interpreter rewrites each @triton.jit function on first use and leaves its state in triton's
# modules (its globals added to the library's module namespaces, rewritten functions cached by function,
# the builder's grid): with TRITON_INTERPRET=1 all of triton's mutable state is put back after each job
INTERPRETER_RESTORES = "triton"
_WEAK_MAPPINGS = (weakref.WeakKeyDictionary, weakref.WeakValueDictionary)
_OPAQUE = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodWrapperType,
           types.MethodDescriptorType, types.GetSetDescriptorType, types.MemberDescriptorType, str, bytes, int,
           float, complex, bool, type(None), types.CodeType)
_get = object.__getattribute__


def _instance_dict(obj):
    try:
        found = _get(obj, "__dict__")
    except Exception:  # no __dict__, or a descriptor that refuses
        return None
    return found if type(found) is dict else None


# What each kind of recorded object holds, computed for many objects at once (and for one, to find which one
# changed): the objects that must still be there, compared by identity, and the plain values that must be
# equal. Identity is compared with operator.is_, not id(): id() raises an audit event, and the worker's
# audit hooks (guard.py) would run on each of the million calls.
def _dict_pass(dicts):  # all keys, then all values (no pair is built)
    return list(chain(chain.from_iterable(map(dict.keys, dicts)), chain.from_iterable(map(dict.values, dicts)))), []


def _class_pass(classes):
    namespaces = list(map(vars, classes))
    return list(chain(chain.from_iterable(map(_KEYS, namespaces)), chain.from_iterable(map(_VALUES, namespaces)))), []


_KEYS, _VALUES = operator.methodcaller("keys"), operator.methodcaller("values")


def _seq_pass(seqs):
    return list(chain.from_iterable(map(list, seqs))), []


def _function_pass(functions):  # code, defaults, keyword defaults, attribute dict; how many attributes
    dicts = list(map(_get, functions, repeat("__dict__")))
    return list(chain(map(_CODE, functions), map(_DEFAULTS, functions), map(_KWDEFAULTS, functions), dicts)), \
        list(map(len, dicts))


_CODE, _DEFAULTS, _KWDEFAULTS = (operator.attrgetter(name) for name in ("__code__", "__defaults__", "__kwdefaults__"))


def _cell_pass(cells):
    return list(map(operator.attrgetter("cell_contents"), cells)), []


def _instance_pass(objects):
    return list(chain.from_iterable(zip(map(type, objects), map(_instance_dict, objects)))), []


def _weak_pass(objects):
    return list(chain.from_iterable(chain.from_iterable(o.items()) if type(o) in _WEAK_MAPPINGS else list(o)
                                    for o in objects)), []


_PASSES = {"dict": _dict_pass, "class": _class_pass, "seq": _seq_pass, "set": _seq_pass, "function": _function_pass,
           "cell": _cell_pass, "instance": _instance_pass, "weak": _weak_pass,
           "bytes": lambda objs: ([], list(map(bytes, objs)))}


def _same(now: tuple[list, list], then: tuple[list, list]) -> bool:
    """Two passes agree: the same objects in the same places, and equal values."""
    return len(now[0]) == len(then[0]) and all(map(operator.is_, now[0], then[0])) and now[1] == then[1]


class Contents:
    """The snapshot of every mutable object reached from the modules: for each kind, the objects, their
    paths (parent entry, key) and the flat identities of what they held."""

    def __init__(self):
        self.objects: dict[str, list] = collections.defaultdict(list)
        self.paths: dict[str, list] = collections.defaultdict(list)
        self.restored_ids: set[int] = set()  # attribute dicts of RESTORED_CLASSES objects
        self._walk()
        self.refreshed()

    def refreshed(self) -> Contents:
        """Record what the objects hold now (also for a process forked from the one that walked, which has
        changed only a few plain values since: CPU workers, before their first job). `held` keeps each
        object's items alive, so that no identity is reused while we compare. Only the chunks whose pass
        differs from the last record are recorded again object by object (in a forked worker one or two of
        hundreds: the per-object records cost seconds, the passes a fraction of that); the same identities
        of items held alive all along are the same items."""
        before = getattr(self, "saved", None)
        if before is None:
            self.held = {kind: [_held(kind, o) for o in objects] for kind, objects in self.objects.items()}
            self.saved = {kind: self._pass(kind) for kind in self.objects}
            self.restored = self._restored()
            return self
        now, changed = {kind: self._pass(kind) for kind in self.objects}, set()
        for kind, chunks in now.items():
            objects, held = self.objects[kind], self.held[kind]
            for i, (chunk, saved) in enumerate(zip(chunks, before[kind])):
                if not _same(chunk, saved):  # held first, then the pass again: nothing they hold is freed in between
                    span = slice(i * CHUNK, (i + 1) * CHUNK)
                    held[span] = [_held(kind, o) for o in objects[span]]
                    chunks[i] = _PASSES[kind](objects[span])
                    changed.add(kind)
        self.saved = now
        if {"dict", "seq", "set", "class"} & changed:
            self.restored = self._restored()
        return self

    def _restored(self) -> list[tuple[str, object, list]]:
        """(kind, object, what it held) for each object put back after a job: those RESTORED names, the
        warning registries of every module, all of triton's under its interpreter."""
        interpreter = os.environ.get("TRITON_INTERPRET") == "1"
        found = []
        for kind in ("dict", "seq", "set", "class"):
            for obj, path in zip(self.objects.get(kind, ()), self.paths.get(kind, ())):
                module, attribute = _module_attribute(path)
                if (module, attribute) in RESTORED or ("*", attribute) in RESTORED or id(obj) in self.restored_ids \
                        or interpreter and module.partition(".")[0] == INTERPRETER_RESTORES:
                    found.append((kind, obj, _held(kind, obj)))
                elif kind == "dict" and attribute is None and "__warningregistry__" not in obj:
                    found.append(("no warnings", obj, (None, None)))  # a module namespace: no registry may appear
        return found

    def _pass(self, kind: str) -> list[tuple[list, list]]:
        """The kind's pass, chunk by chunk (CHUNK objects each), so that a difference is found in its chunk."""
        objects, flat = self.objects[kind], _PASSES[kind]
        return [flat(objects[i:i + CHUNK]) for i in range(0, len(objects), CHUNK)]

    def _walk(self) -> None:
        # compared apart (reuse.py): the modules (honest jobs import more of torch), the environment (each job
        # sets its variables again, as new objects), the threads
        import threading

        seen: set[int] = {id(sys.modules), id(os.environ._data), *(id(getattr(threading, name, None)) for name in
                                                                 ("_dangling", "_active", "_limbo", "_shutdown_locks"))}
        stack: list = []
        for name, module in list(sys.modules.items()):
            namespace = None if module is None or id(module) in seen else _instance_dict(module)
            if namespace is None:
                continue
            seen.add(id(module))
            self._add("instance", module, (name,))  # a module's __class__ can be reassigned
            stack.append((namespace, (name,), 0))
        add, push = self._add, stack.append
        while stack:
            obj, path, depth = stack.pop()
            if depth > MAX_DEPTH or id(obj) in seen:
                continue
            seen.add(id(obj))
            t = type(obj)
            if issubclass(t, _OPAQUE) or issubclass(t, types.ModuleType):
                continue  # immutable, or walked from sys.modules
            if issubclass(t, threading.Thread):
                continue  # a live thread changes its own attributes (tqdm's monitor); new threads retire (reuse.py)
            deeper = depth + 1
            if issubclass(t, dict):
                add("dict", obj, path)
                for k, v in list(dict.items(obj)):
                    push((v, (path, k), deeper))
            elif issubclass(t, (list, collections.deque)):
                add("seq", obj, path)
                for i, v in enumerate(list(obj)):
                    push((v, (path, i), deeper))
            elif issubclass(t, set):
                add("set", obj, path)
                for v in list(obj):
                    push((v, (path, "<item>"), deeper))
            elif t is tuple or t is frozenset:
                for i, v in enumerate(obj):
                    push((v, (path, i), deeper))
            elif issubclass(t, type):
                namespace = vars(obj)
                path = _own_name(obj) or path
                add("class", obj, path)
                for k, v in list(namespace.items()):
                    push((v, (path, k), deeper))
            elif t is types.FunctionType:
                path = _own_name(obj) or path
                add("function", obj, path)
                if obj.__dict__:  # an empty one is compared by its length, in the function's own pass
                    push((obj.__dict__, (path, "__dict__"), deeper))
                push((obj.__defaults__, (path, "__defaults__"), deeper))
                push((obj.__kwdefaults__, (path, "__kwdefaults__"), deeper))
                for i, cell in enumerate(obj.__closure__ or ()):
                    try:
                        push((cell.cell_contents, (path, f"<closure {i}>"), deeper))
                    except ValueError:
                        continue  # an empty cell
                    add("cell", cell, (path, f"<closure {i}>"))
            elif t is bytearray:
                add("bytes", obj, path)
            elif t in _WEAK_MAPPINGS or t is weakref.WeakSet:
                add("weak", obj, path)
            elif t in (classmethod, staticmethod):
                push((obj.__func__, path, depth))
            elif t is property:
                for f in (obj.fget, obj.fset, obj.fdel):
                    push((f, path, depth))
            elif t is functools.partial:
                push((obj.func, path, depth))
                push((obj.args, path, deeper))
                push((obj.keywords, (path, "keywords"), deeper))
            elif t is types.MethodType:
                push((obj.__func__, path, depth))
                push((obj.__self__, (path, "__self__"), deeper))
            else:
                namespace = _instance_dict(obj)
                if namespace is not None:
                    add("instance", obj, path)
                    push((namespace, path, depth))
                    if f"{t.__module__}.{t.__qualname__}" in RESTORED_CLASSES:
                        self.restored_ids.add(id(namespace))

    def _add(self, kind: str, obj, path) -> None:
        self.objects[kind].append(obj)
        self.paths[kind].append(path)

    def differences(self, limit: int = 5) -> list[str]:
        """What differs from the snapshot, at most `limit` objects (empty: nothing)."""
        found = []
        for kind in self.objects:
            try:
                now = self._pass(kind)
            except ValueError:  # a closure cell was emptied: look at every chunk
                now = None
            for i, saved in enumerate(self.saved[kind]):
                if now is None or not _same(now[i], saved):
                    found += self._which(kind, slice(i * CHUNK, (i + 1) * CHUNK), limit - len(found))
                    if len(found) >= limit:
                        return found
        return found

    def _which(self, kind: str, span: slice, limit: int) -> list[str]:
        found = []
        for obj, path, (before, items) in zip(self.objects[kind][span], self.paths[kind][span], self.held[kind][span]):
            try:
                after, now = _held(kind, obj)
            except ValueError:
                after, now = None, None
            if after is not None and (_same(after, before) or kind == "set" and len(after[0]) == len(before[0])
                                      and set(map(id, after[0])) == set(map(id, before[0]))):
                continue
            found += _changes(kind, _path_text(path), items, now)
            if len(found) >= limit:
                break
        return found[:limit]

    def restore(self) -> None:
        """Put back the objects that honest jobs change on their own (see _restored)."""
        for kind, obj, (held_pass, held) in self.restored:
            if kind == "no warnings":
                obj.pop("__warningregistry__", None)
            elif not _same(_held(kind, obj)[0], held_pass):
                if kind == "dict":
                    dict.clear(obj)
                    dict.update(obj, held)
                elif kind == "seq":
                    obj[:] = held
                elif kind == "set":
                    obj.clear()
                    obj.update(held)
                else:
                    _restore_class(obj, dict(held))

def _own_name(obj) -> tuple[str] | None:
    """A class's or function's dotted name, for the messages (whatever path the walk reached it by)."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return (f"{module}.{name}",) if type(module) is str and type(name) is str else None


def _path_text(path) -> str:
    parts = []
    while isinstance(path, tuple) and len(path) == 2:
        path, key = path
        parts.append(_key_step(key))
    parts.append(path[0] if isinstance(path, tuple) else str(path))
    return "".join(reversed(parts))


def _module_attribute(path) -> tuple[str, str | None]:
    """The module a path starts from, and the attribute of it (None for the module's namespace itself)."""
    attribute = None
    while isinstance(path, tuple) and len(path) == 2:
        path, attribute = path
    return path[0], attribute if isinstance(attribute, str) or attribute is None else None


def _held(kind: str, obj) -> tuple[tuple[list, list], object]:
    """What one object holds: its pass (as _PASSES makes for many) and the items themselves (kept alive, so
    that no identity is reused while we compare; put back by restore())."""
    if kind in ("dict", "class"):
        items = list(dict.items(obj) if kind == "dict" else vars(obj).items())
        return ([k for k, _ in items] + [v for _, v in items], []), items
    if kind == "bytes":
        return ([], [bytes(obj)]), None
    one = _PASSES[kind]([obj])
    return one, one[0]


def _restore_class(cls, held: dict) -> None:
    namespace = vars(cls)
    for name in [name for name in namespace if name not in held]:
        try:
            delattr(cls, name)
        except (AttributeError, TypeError):
            pass
    for name, value in held.items():
        if namespace.get(name, _ABSENT) is not value:
            try:
                setattr(cls, name, value)
            except (AttributeError, TypeError):
                pass


_ABSENT = object()

def _changes(kind: str, path: str, before, after) -> list[str]:
    """Sentences for what changed in one object, from what it held then and holds now."""
    if after is None:
        return [f"{path}: a closure cell was emptied"]
    if kind in ("dict", "class"):
        then, now = {id(k): (k, v) for k, v in before}, {id(k): (k, v) for k, v in after}
        said = [f"{path}{_key_step(now[k][0])} was added" for k in now.keys() - then.keys()]
        said += [f"{path}{_key_step(then[k][0])} was removed" for k in then.keys() - now.keys()]
        said += [f"{path}{_key_step(now[k][0])} was replaced" for k in now.keys() & then.keys()
                 if now[k][1] is not then[k][1]]
        return said or [f"{path} was reordered"]
    if kind in ("seq", "set", "weak"):
        return [f"{path} changed in place ({len(before)} items -> {len(after)})"]
    if kind == "function":
        what = next((what for what, a, b in zip(("code", "defaults", "keyword defaults", "attributes"), before, after)
                     if a is not b), "attributes")
        return [f"{path}: its {what} {'were' if what.endswith('s') else 'was'} replaced"]
    if kind == "instance":
        return [f"{path}: its {'class' if before[0] is not after[0] else 'attribute dict'} was replaced"]
    return [f"{path} changed in place"]


def _key_step(key) -> str:
    return f".{key}" if type(key) is str and key.isidentifier() else f"[{key!r}]" if type(key) in (
        str, int, float, bool, bytes) else f"[<{type(key).__name__}>]"
