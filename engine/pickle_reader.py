"""The pickle inside a `torch.save` file, read as `torch.load(weights_only=True)` reads it
(torch/_weights_only_unpickler.py) and without torch: an interpreter of the opcodes protocol 2 writes whose
GLOBALs come only from `allowed` (a dotted name -> the loading side's object), so nothing is imported and only
those callables run; BUILD sets attributes of OrderedDicts and Variables only, APPEND fills lists only and
SETITEM dicts only. Anything else raises `pickle.UnpicklingError` with torch's message."""

from __future__ import annotations

import pickle
from collections import Counter, OrderedDict
from collections.abc import Callable
from struct import unpack
from typing import Any

BLOCKED = ("sys", "os", "posix", "nt")  # never allowed, as torch's `_blocklisted_modules`
RENAMED = {"__builtin__": "builtins", "copy_reg": "copyreg"}  # Python 2's module names, which protocol 2 writes
CONSTANTS = {pickle.NONE: None, pickle.NEWTRUE: True, pickle.NEWFALSE: False}
EMPTY = {pickle.EMPTY_TUPLE: tuple, pickle.EMPTY_LIST: list, pickle.EMPTY_DICT: dict, pickle.EMPTY_SET: set}
FIXED = {pickle.BININT: ("<i", 4), pickle.BININT1: ("<B", 1), pickle.BININT2: ("<H", 2), pickle.BINFLOAT: (">d", 8)}
TUPLES = {pickle.TUPLE1: 1, pickle.TUPLE2: 2, pickle.TUPLE3: 3}
MEMO = {pickle.BINGET: ("<B", 1), pickle.LONG_BINGET: ("<I", 4)}
PUT = {pickle.BINPUT: ("<B", 1), pickle.LONG_BINPUT: ("<I", 4)}


class Unpickler:
    """`Unpickler(file, allowed, persistent_load).load()`: the object `file`'s pickle holds (see the module)."""

    def __init__(self, file: Any, allowed: dict, persistent_load: Callable, settable: tuple = ()):
        self.read, self.readline = file.read, file.readline
        self.allowed, self.persistent_load, self.settable = allowed, persistent_load, settable
        self.callables = {id(value) for value in allowed.values()}
        self.memo: dict = {}

    def load(self) -> Any:
        self.stack: list = []
        self.marks: list = []
        while True:
            key = self.read(1)
            if not key:
                raise EOFError
            if key in CONSTANTS:
                self.stack.append(CONSTANTS[key])
            elif key in EMPTY:
                self.stack.append(EMPTY[key]())
            elif key in FIXED:
                self.stack.append(unpack(FIXED[key][0], self.read(FIXED[key][1]))[0])
            elif key in TUPLES:
                n = TUPLES[key]
                self.stack[-n:] = [tuple(self.stack[-n:])]
            elif key in MEMO:
                self.stack.append(self.memo[unpack(MEMO[key][0], self.read(MEMO[key][1]))[0]])
            elif key in PUT:
                self.memo[unpack(PUT[key][0], self.read(PUT[key][1]))[0]] = self.stack[-1]
            elif key == pickle.STOP:
                return self.stack.pop()
            else:
                self.dispatch(key)

    def dispatch(self, key: bytes) -> None:
        stack = self.stack
        if key == pickle.PROTO:
            self.read(1)
        elif key == pickle.GLOBAL:
            stack.append(self.find_global())
        elif key == pickle.MARK:
            self.marks.append(stack)
            self.stack = []
        elif key == pickle.TUPLE:
            items = self.pop_mark()
            self.stack.append(tuple(items))
        elif key == pickle.BINUNICODE:
            stack.append(str(self.read(unpack("<I", self.read(4))[0]), "utf-8", "surrogatepass"))
        elif key == pickle.SHORT_BINSTRING:
            stack.append(self.read(self.read(1)[0]).decode("utf-8"))
        elif key == pickle.LONG1:
            stack.append(int.from_bytes(self.read(self.read(1)[0]), "little", signed=True))
        elif key == pickle.REDUCE:
            args, func = stack.pop(), stack[-1]
            if id(func) not in self.callables:
                raise pickle.UnpicklingError(f"Trying to call reduce for unrecognized function {func}")
            stack[-1] = func(*args)
        elif key == pickle.NEWOBJ:
            args, cls = stack.pop(), stack.pop()
            if id(cls) not in self.callables or not isinstance(cls, type):
                raise pickle.UnpicklingError(
                    "Can only create new object for nn.Parameter or classes allowlisted via `add_safe_globals` "
                    f"but got {cls}"
                )
            parameter = cls is self.allowed.get("torch.nn.parameter.Parameter")
            stack.append(cls(*args) if parameter else cls.__new__(cls, *args))
        elif key == pickle.BUILD:
            self.build(stack.pop(), stack[-1])
        elif key in (pickle.APPEND, pickle.APPENDS):
            items = [stack.pop()] if key == pickle.APPEND else self.pop_mark()
            if type(self.stack[-1]) is not list:
                raise pickle.UnpicklingError(f"Can only append to lists, but got {type(self.stack[-1])}")
            self.stack[-1].extend(items)
        elif key in (pickle.SETITEM, pickle.SETITEMS):
            items = [stack.pop(-2), stack.pop()] if key == pickle.SETITEM else self.pop_mark()
            if type(self.stack[-1]) not in (dict, OrderedDict, Counter):
                raise pickle.UnpicklingError(
                    f"Can only {'SETITEM' if key == pickle.SETITEM else 'SETITEMS'} for dict, collections.OrderedDict, "
                    f"collections.Counter, but got {type(self.stack[-1])}"
                )
            for i in range(0, len(items), 2):
                self.stack[-1][items[i]] = items[i + 1]
        elif key == pickle.BINPERSID:
            pid = stack.pop()
            if type(pid) is not tuple or not pid or pid[0] not in ("storage", b"storage"):
                raise pickle.UnpicklingError(f"Only persistent_load of storage is allowed, but got {pid!r:.80}")
            stack.append(self.persistent_load(pid))
        else:
            raise pickle.UnpicklingError(f"Unsupported operand {key[0]}")

    def find_global(self) -> Any:
        module, name = (self.readline()[:-1].decode("utf-8") for _ in range(2))
        module = RENAMED.get(module, module)
        full_path = f"{module}.{name}"
        if module in BLOCKED:
            raise pickle.UnpicklingError(
                f"Trying to load unsupported GLOBAL {full_path} whose module {module} is blocked."
            )
        if full_path not in self.allowed:
            full_path = full_path.removeprefix("builtins.")  # torch names a builtin as `eval`
            raise pickle.UnpicklingError(
                f"Unsupported global: GLOBAL {full_path} was not an allowed global by default."
            )
        return self.allowed[full_path]

    def build(self, state: Any, inst: Any) -> None:
        if not isinstance(inst, (OrderedDict, *self.settable)) or not isinstance(state, dict):
            raise pickle.UnpicklingError(
                f"Can only build Tensor, Parameter, OrderedDict or types allowlisted via `add_safe_globals`, but got {type(inst)}"
            )
        for name, value in state.items():
            setattr(inst, name, value)

    def pop_mark(self) -> list:
        items, self.stack = self.stack, self.marks.pop()
        return items
