"""The one seam between anekit and Objective-C: AppleNeuralEngine.framework through PyObjC.

Everything the ANE backend touches in the Objective-C world goes through a
:class:`Framework`: classes by name, real ``NSData``/``NSDictionary``/``NSArray``/
``NSNumber``/``NSURL`` objects, ``NSTemporaryDirectory()``, the IOSurface C functions
and runtime introspection. Objects it returns are called the PyObjC way
(``model.compileWithQoS_options_error_(21, opts, None) -> (ok, error)``).
The contract test replaces it with a recording stand-in; nothing else in the
backend imports PyObjC. PyObjC is imported lazily, only on macOS.
"""

from __future__ import annotations

import ctypes
import platform
import re
import sys
import threading
from pathlib import Path
from typing import Any

from anekit.errors import BackendUnavailable

FRAMEWORK_PATH = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework"

# The classes the backend needs; loading fails with a reason if one is missing.
REQUIRED_CLASSES = (
    "_ANEInMemoryModelDescriptor",
    "_ANEInMemoryModel",
    "_ANEIOSurfaceObject",
    "_ANERequest",
)

# Every selector we call that ends in an ``NSError**``, by class. PyObjC needs this
# metadata (registered before first use) to return ``(result, error)`` tuples.
ERROR_SELECTORS: dict[str, tuple[str, ...]] = {
    "_ANEInMemoryModel": (
        "compileWithQoS:options:error:",
        "loadWithQoS:options:error:",
        "evaluateWithQoS:options:request:error:",
        "unloadWithQoS:error:",
    ),
    "_ANEClient": (
        "compileModel:options:qos:error:",
        "loadModel:options:qos:error:",
        "evaluateWithModel:options:request:qos:error:",
        "unloadModel:options:qos:error:",
    ),
}

PYOBJC_HINT = "pip install pyobjc-core pyobjc-framework-IOSurface"


def platform_problem() -> str | None:
    """Why this machine cannot have the framework at all (None on macOS/arm64); imports nothing."""
    if sys.platform != "darwin":
        return f"needs macOS on Apple silicon; this is {sys.platform} ({platform.machine()})"
    if platform.machine() != "arm64":
        return f"needs Apple silicon; this Mac is {platform.machine()}"
    if not Path(FRAMEWORK_PATH).is_dir():
        return f"{FRAMEWORK_PATH} is missing on this macOS {platform.mac_ver()[0]}"
    return None


_lock = threading.Lock()
_loaded: Framework | None = None
_failure: str | None = None


def problem() -> str | None:
    """Why the framework cannot be used here, or None; loads it (once) on macOS."""
    global _loaded, _failure
    with _lock:
        if _loaded is None and _failure is None:
            _failure = platform_problem()
            if _failure is None:
                try:
                    _loaded = Framework()
                except BackendUnavailable as e:
                    _failure = str(e)
        return _failure


def load() -> Framework:
    """The process-wide Framework; BackendUnavailable says why there is none."""
    reason = problem()
    if reason is not None or _loaded is None:
        raise BackendUnavailable(f"backend 'ane' is unavailable: {reason}", backend="ane")
    return _loaded


def describe_error(error: Any) -> tuple[str, str | None, int | None]:
    """The text, domain and code of an NSError (the framework may fail without one)."""
    if error is None:
        return "the framework reported failure without an NSError", None, None
    text = str(error.localizedDescription())
    info = error.userInfo()
    if info:
        text += f" ({info})"
    return text, str(error.domain()), int(error.code())


_MIL_LINE = re.compile(r"(?:\bline\s*[:=]?\s*|model\.mil:)(\d+)", re.IGNORECASE)


def mil_line(text: str) -> int | None:
    """The MIL line number an error message names, if it names one."""
    m = _MIL_LINE.search(text)
    return int(m.group(1)) if m else None


class Framework:
    """The real bridge: PyObjC objects from AppleNeuralEngine, Foundation and IOSurface."""

    def __init__(self) -> None:
        try:
            import Foundation
            import IOSurface
            import objc
        except ImportError as e:
            raise BackendUnavailable(f"PyObjC is not installed ({e}); {PYOBJC_HINT}") from e
        try:
            objc.loadBundle("AppleNeuralEngine", {}, bundle_path=FRAMEWORK_PATH, scan_classes=False)
        except Exception as e:  # PyObjC raises ImportError or objc.error variants
            raise BackendUnavailable(f"cannot load {FRAMEWORK_PATH}: {e}") from e
        _register_error_metadata(objc)
        missing = [n for n in REQUIRED_CLASSES if not _has_class(objc, n)]
        if missing:
            raise BackendUnavailable(
                f"{FRAMEWORK_PATH} loaded but lacks {', '.join(missing)} "
                f"(macOS {platform.mac_ver()[0]})"
            )
        self._objc = objc
        self._ns = Foundation
        self._ios = IOSurface
        self.pyobjc_version: str = objc.__version__

    # -- Objective-C objects -------------------------------------------------------------------
    def cls(self, name: str) -> Any:
        """An Objective-C class by name; BackendUnavailable if the framework lacks it."""
        try:
            return self._objc.lookUpClass(name)
        except self._objc.nosuchclass_error:
            raise BackendUnavailable(
                f"{FRAMEWORK_PATH} has no class {name}", backend="ane"
            ) from None

    def data(self, payload: bytes) -> Any:
        """An NSData copy of ``payload``."""
        return self._ns.NSData.dataWithBytes_length_(payload, len(payload))

    def number(self, value: int | bool) -> Any:
        """An NSNumber (booleans as the CFBoolean singletons)."""
        if isinstance(value, bool):
            return self._ns.NSNumber.numberWithBool_(value)
        return self._ns.NSNumber.numberWithLongLong_(value)

    def dictionary(self, items: dict[Any, Any]) -> Any:
        """An NSDictionary of already-bridged keys and values."""
        d = self._ns.NSMutableDictionary.dictionaryWithCapacity_(len(items))
        for key, value in items.items():
            d.setObject_forKey_(value, key)
        return d

    def array(self, items: list[Any]) -> Any:
        """An NSArray of already-bridged objects."""
        a = self._ns.NSMutableArray.arrayWithCapacity_(len(items))
        for item in items:
            a.addObject_(item)
        return a

    def file_url(self, path: str) -> Any:
        """An NSURL for a local path."""
        return self._ns.NSURL.fileURLWithPath_(path)

    def temporary_directory(self) -> str:
        """``NSTemporaryDirectory()``: where the compiler looks for ``<hex>/model.mil``."""
        return str(self._ns.NSTemporaryDirectory())

    # -- IOSurface -----------------------------------------------------------------------------
    def surface_create(self, properties: dict[str, int | bool]) -> Any:
        """``IOSurfaceCreate``; keys are property names without the ``kIOSurface`` prefix."""
        props = {
            getattr(self._ios, "kIOSurface" + k): self.number(v) for k, v in properties.items()
        }
        return self._ios.IOSurfaceCreate(self.dictionary(props))

    def surface_lock(self, surface: Any, options: int) -> int:
        """``IOSurfaceLock``; returns the kern_return_t."""
        return _status(self._ios.IOSurfaceLock(surface, options, None))

    def surface_unlock(self, surface: Any, options: int) -> int:
        """``IOSurfaceUnlock``; returns the kern_return_t."""
        return _status(self._ios.IOSurfaceUnlock(surface, options, None))

    def surface_memory(self, surface: Any, nbytes: int) -> memoryview:
        """The first ``nbytes`` of the surface's memory, writable, without copying."""
        return memoryview(self._ios.IOSurfaceGetBaseAddress(surface).as_buffer(nbytes))

    def surface_id(self, surface: Any) -> int:
        """``IOSurfaceGetID``: the ID another process can look the surface up by."""
        return int(self._ios.IOSurfaceGetID(surface))

    def surface_lookup(self, surface_id: int) -> Any:
        """``IOSurfaceLookup``: a global surface by ID, or None."""
        return self._ios.IOSurfaceLookup(surface_id)

    # -- runtime introspection ------------------------------------------------------------------
    def class_names(self) -> list[str]:
        """Every Objective-C class the framework image defines."""
        return _runtime().class_names(b"_ANEClient")

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        """``(kind, selector, type encoding)`` of a class; kind is ``+`` (class) or ``-``."""
        return _runtime().methods(class_name.encode())


def _register_error_metadata(objc: Any) -> None:
    for class_name, selectors in ERROR_SELECTORS.items():
        for selector in selectors:
            # PyObjC counts self and _cmd as arguments 0 and 1, so the last of n
            # colon-terminated arguments (the NSError**) is argument n + 1.
            error_index = selector.count(":") + 1
            objc.registerMetaDataForSelector(
                class_name.encode(),
                selector.encode(),
                {
                    "retval": {"type": objc._C_NSBOOL},
                    "arguments": {error_index: {"type_modifier": objc._C_OUT}},
                },
            )


def _has_class(objc: Any, name: str) -> bool:
    try:
        objc.lookUpClass(name)
    except objc.nosuchclass_error:
        return False
    return True


def _status(result: Any) -> int:
    # PyObjC returns (kern_return, seed) when it passes the seed pointer back, else the bare value.
    return int(result[0] if isinstance(result, tuple) else result)


class _Runtime:
    """The Objective-C runtime's C introspection API (``objc/runtime.h``) through ctypes."""

    def __init__(self) -> None:
        lib = ctypes.CDLL("/usr/lib/libobjc.A.dylib")
        vp, cp, uint_p = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint)
        for name, restype, argtypes in (
            ("objc_getClass", vp, [cp]),
            ("object_getClass", vp, [vp]),
            ("class_getImageName", cp, [vp]),
            ("objc_copyClassNamesForImage", ctypes.POINTER(cp), [cp, uint_p]),
            ("class_copyMethodList", ctypes.POINTER(vp), [vp, uint_p]),
            ("method_getName", vp, [vp]),
            ("sel_getName", cp, [vp]),
            ("method_getTypeEncoding", cp, [vp]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes
        self._lib = lib
        self._free = ctypes.CDLL(None).free
        self._free.argtypes = [vp]

    def class_names(self, anchor: bytes) -> list[str]:
        lib, count = self._lib, ctypes.c_uint()
        image = lib.class_getImageName(lib.objc_getClass(anchor))
        names = lib.objc_copyClassNamesForImage(image, ctypes.byref(count))
        try:
            return sorted(names[i].decode() for i in range(count.value))
        finally:
            self._free(ctypes.cast(names, ctypes.c_void_p))

    def methods(self, class_name: bytes) -> list[tuple[str, str, str]]:
        cls = self._lib.objc_getClass(class_name)
        if not cls:
            return []
        meta = self._lib.object_getClass(cls)
        return self._method_list(meta, "+") + self._method_list(cls, "-")

    def _method_list(self, cls: int, kind: str) -> list[tuple[str, str, str]]:
        lib, count = self._lib, ctypes.c_uint()
        methods = lib.class_copyMethodList(cls, ctypes.byref(count))
        try:
            rows = []
            for i in range(count.value):
                m = methods[i]
                encoding = lib.method_getTypeEncoding(m) or b""
                rows.append(
                    (kind, lib.sel_getName(lib.method_getName(m)).decode(), encoding.decode())
                )
            return sorted(rows)
        finally:
            self._free(ctypes.cast(methods, ctypes.c_void_p))


_runtime_instance: _Runtime | None = None


def _runtime() -> _Runtime:
    global _runtime_instance
    if _runtime_instance is None:
        _runtime_instance = _Runtime()
    return _runtime_instance
