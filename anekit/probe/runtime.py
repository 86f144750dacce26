"""Replacing Objective-C methods for the life of a trace, through PyObjC (macOS only).

The tracer (:mod:`anekit.probe.tracing`) works against this small interface, which the
contract test replaces with a stand-in:

- ``methods(class_name)``: ``(kind, selector, type encoding)`` of what a class defines;
- ``swizzle(class_name, kind, selector, encoding, around)``: make ``selector`` call
  ``around(call_original, receiver, args)``; returns a handle;
- ``restore(handle)``: put the original implementation back.

:class:`PyObjCRuntime` adds a method ``anekitTraced<Selector>`` to the class, implemented
in Python with the original's type encoding (and its ``NSError**`` out-parameter
metadata), and exchanges the two implementations with ``method_exchangeImplementations``:
the original selector then runs the Python wrapper, which calls the original code
through the added name. Restoring exchanges them back; the added name stays (a class
cannot lose a method) but nothing calls it.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anekit.backends.ane import framework
from anekit.probe import encoding

ALIAS_PREFIX = "anekitTraced"
_OFFSETS = re.compile(r"\d+")


def alias(selector: str) -> str:
    """``compileWithQoS:options:error:`` -> ``anekitTracedCompileWithQoS:options:error:``."""
    return ALIAS_PREFIX + selector[:1].upper() + selector[1:]


@dataclass(frozen=True)
class Swizzle:
    """One replaced method, to be put back."""

    class_name: str
    kind: str
    selector: str
    alias: str


class PyObjCRuntime:
    """The real runtime: PyObjC to add methods, libobjc to exchange implementations."""

    def __init__(self) -> None:
        import objc

        self._objc = objc
        self._fw = framework.load()  # the classes exist once the framework is loaded
        lib = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
        vp = ctypes.c_void_p
        for name, restype, argtypes in (
            ("objc_getClass", vp, [ctypes.c_char_p]),
            ("object_getClass", vp, [vp]),
            ("sel_registerName", vp, [ctypes.c_char_p]),
            ("class_getInstanceMethod", vp, [vp, vp]),
            ("method_exchangeImplementations", None, [vp, vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self._lib = lib

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        return self._fw.methods(class_name)

    def swizzle(
        self, class_name: str, kind: str, selector: str, enc: str, around: Callable[..., Any]
    ) -> Swizzle:
        objc = self._objc
        cls = objc.lookUpClass(class_name)
        name = alias(selector)
        py_alias = name.replace(":", "_")
        if selector.lower().endswith("error:") and encoding.arguments(enc)[-1].endswith("^@"):
            for sel in (selector, name):  # NSError** is an out-parameter: (result, error)
                self._fw.error_out(class_name, sel)

        def impl(receiver: Any, *args: Any) -> Any:
            return around(lambda r, *a: getattr(r, py_alias)(*a), receiver, args)

        method = objc.selector(
            impl,
            selector=name.encode(),
            signature=_OFFSETS.sub("", enc).encode(),
            isClassMethod=kind == "+",
        )
        objc.classAddMethods(cls, [method])
        handle = Swizzle(class_name, kind, selector, name)
        self._exchange(handle)
        return handle

    def restore(self, handle: Swizzle) -> None:
        self._exchange(handle)

    def _exchange(self, h: Swizzle) -> None:
        lib = self._lib
        target = lib.objc_getClass(h.class_name.encode())
        if h.kind == "+":
            target = lib.object_getClass(target)  # class methods live on the metaclass
        first = lib.class_getInstanceMethod(target, lib.sel_registerName(h.selector.encode()))
        second = lib.class_getInstanceMethod(target, lib.sel_registerName(h.alias.encode()))
        if not first or not second:
            raise LookupError(f"{h.kind}[{h.class_name} {h.selector}] or its alias is missing")
        lib.method_exchangeImplementations(first, second)
