"""The one seam between anekit and Objective-C: AppleNeuralEngine.framework through PyObjC.

Everything the ANE backend touches in the Objective-C world goes through a
:class:`Framework`: classes by name, real ``NSData``/``NSDictionary``/``NSArray``/
``NSNumber``/``NSURL`` objects, ``NSTemporaryDirectory()``, autorelease pools, the
IOSurface C functions and runtime introspection. Objects it returns are called the
PyObjC way (``model.compileWithQoS_options_error_(21, opts, None) -> (ok, error)``).
The contract test replaces it with a recording stand-in; nothing else in the
backend imports PyObjC. PyObjC is imported lazily, only on macOS.

:data:`SELECTORS` lists every class and selector the backend sends, so ``doctor
--ladder`` can check each exists (with its runtime type encoding) before anything
runs, and the contract test can check the list is complete.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import re
import threading
from collections.abc import Iterator
from typing import Any

from anekit.backends.ane import host
from anekit.errors import AnekitError, BackendUnavailable, EvaluationError

FRAMEWORK_PATH = host.FRAMEWORK_PATH

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

# What ``+[_ANEDeviceInfo ...]`` can tell (class methods without arguments).
DEVICE_INFO = (
    "hasANE",
    "isVirtualMachine",
    "aneSubType",
    "aneSubTypeVariant",
    "aneArchitectureType",
    "aneBoardType",
    "numANECores",
    "numANEs",
    "productName",
    "buildVersion",
)

# Every selector the backend sends, by class: ``+`` class methods, ``-`` instance methods.
SELECTORS: dict[str, tuple[tuple[str, str], ...]] = {
    "_ANEInMemoryModelDescriptor": (("+", "modelWithMILText:weights:optionsPlist:"),),
    "_ANEInMemoryModel": (
        ("+", "inMemoryModelWithDescriptor:"),
        ("-", "hexStringIdentifier"),
        ("-", "compileWithQoS:options:error:"),
        ("-", "loadWithQoS:options:error:"),
        ("-", "evaluateWithQoS:options:request:error:"),
        ("-", "unloadWithQoS:error:"),
        ("-", "setPerfStatsMask:"),
        ("-", "model"),
        ("-", "modelAttributes"),
    ),
    "_ANEModel": (
        ("+", "modelAtURL:key:"),
        ("-", "modelAttributes"),
        ("-", "setPerfStatsMask:"),
    ),
    "_ANEClient": (
        ("+", "sharedConnection"),
        ("-", "compileModel:options:qos:error:"),
        ("-", "loadModel:options:qos:error:"),
        ("-", "evaluateWithModel:options:request:qos:error:"),
        ("-", "unloadModel:options:qos:error:"),
    ),
    "_ANEIOSurfaceObject": (("+", "objectWithIOSurface:"),),
    "_ANERequest": (
        (
            "+",
            "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:"
            "procedureIndex:",
        ),
        ("-", "validate"),
        ("-", "perfStatsArray"),
        ("-", "perfStats"),
    ),
    "_ANEPerformanceStats": (("+", "statsWithHardwareExecutionNS:"), ("-", "hwExecutionTime")),
    "_ANEDeviceInfo": tuple(("+", s) for s in DEVICE_INFO),
}

# Selectors the backend asks for only if they exist (it works, with less, without them).
OPTIONAL_SELECTORS = frozenset(
    {"setPerfStatsMask:", "model", "modelAttributes", "statsWithHardwareExecutionNS:",
     "hwExecutionTime", "validate", "perfStatsArray", "perfStats", *DEVICE_INFO}
)  # fmt: skip

# Classes only ``compile_mlmodelc`` (the ``_ANEClient`` path, ANE_NOTES 2.2) sends to; the
# in-memory path never does, so their absence costs that path only.
CLIENT_PATH_CLASSES = frozenset({"_ANEClient"})
CLIENT_PATH_SELECTORS = frozenset({"modelAtURL:key:"})

# PyObjC merges a registered ``type_modifier`` into the argument's native type: an
# out-parameter ``NSError**`` reads ``{"type": b"o^@"}`` in ``__metadata__()`` (pyobjc-core
# Modules/objc/method-signature.m; PyObjC's own ``assertArgIsOut`` tests this prefix).
OUT_PARAMETER_PREFIX = b"o^"

PYOBJC_HINT = "pip install pyobjc-core pyobjc-framework-Cocoa pyobjc-framework-IOSurface"
METAL_HINT = "pip install 'anekit[metal]' (pyobjc-framework-Metal)"


def platform_problem() -> str | None:
    """Why this machine cannot have a usable framework at all (None if it may); loads nothing."""
    return host.problem(host.facts())


_lock = threading.Lock()
_loaded: Framework | None = None
_failure: str | None = None


def problem() -> str | None:
    """Why the framework cannot be used here, or None; loads it (once) on macOS.

    Never raises: whatever goes wrong while probing (PyObjC raises many types)
    becomes the reason.
    """
    global _loaded, _failure
    with _lock:
        if _loaded is None and _failure is None:
            try:
                _failure = platform_problem()
                if _failure is None:
                    _loaded = Framework()
            except BackendUnavailable as e:
                _failure = str(e)
            except Exception as e:  # anything unexpected is a reason, never a traceback
                _failure = f"loading the framework raised {type(e).__name__}: {e}"
        return _failure


def load() -> Framework:
    """The process-wide Framework; BackendUnavailable says why there is none."""
    reason = problem()
    if reason is not None or _loaded is None:
        raise BackendUnavailable(f"backend 'ane' is unavailable: {reason}", backend="ane")
    return _loaded


def is_out_parameter(argument: Any) -> bool:
    """Whether one argument of a selector's ``__metadata__()`` is an out-parameter for PyObjC."""
    kind = argument.get("type") if isinstance(argument, dict) else None
    return isinstance(kind, (bytes, str)) and _as_bytes(kind).startswith(OUT_PARAMETER_PREFIX)


def _as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def is_client_path(class_name: str, selector: str) -> bool:
    """Whether only the ``_ANEClient`` path (``compile_mlmodelc``) sends ``selector``."""
    return class_name in CLIENT_PATH_CLASSES or selector in CLIENT_PATH_SELECTORS


def foreign_error(e: BaseException) -> tuple[str, str, Any]:
    """The name, reason and userInfo of an Objective-C exception PyObjC raised as ``objc.error``.

    PyObjC keeps them in ``_pyobjc_info_``; an ``objc.error`` raised by PyObjC itself (a bad
    argument, a missing selector) has none, and its type name and text stand in.
    """
    info = getattr(e, "_pyobjc_info_", None)
    if isinstance(info, dict) and info.get("name") is not None:
        return str(info["name"]), str(info.get("reason")), plain(info.get("userInfo"))
    return type(e).__name__, str(e), None


@contextlib.contextmanager
def translated(fw: Any, what: str, error_type: type[AnekitError]) -> Iterator[None]:
    """Turn an ``objc.error`` raised inside into ``error_type`` naming the exception and reason."""
    try:
        yield
    except fw.foreign_errors as e:
        name, reason, info = foreign_error(e)
        details = {"exception": name, "reason": reason, "userInfo": info}
        raise error_type(f"ANE {what} raised {name}: {reason}", user_info=details) from e


def describe_error(error: Any) -> tuple[str, str | None, int | None, dict[str, Any] | None]:
    """The text, domain, code and userInfo of an NSError (the framework may fail without one)."""
    if error is None:
        return "the framework reported failure without an NSError", None, None, None
    text = str(error.localizedDescription())
    info = plain(error.userInfo())
    if info:
        text += f" ({info})"
    return text, str(error.domain()), int(error.code()), info or None


MAX_PLAIN_DEPTH = 32  # Foundation graphs from the framework are shallow; bound the recursion


def plain(obj: Any, depth: int = 0) -> Any:
    """A JSON-ready copy of a Foundation object graph: dict, list, str, int, float, bool, None.

    PyObjC bridges NSString and NSNumber to ``str``/``int``/``float`` subclasses and
    NSDictionary/NSArray to mappings and sequences; anything else becomes its ``str``.
    """
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj).hex()
    if depth >= MAX_PLAIN_DEPTH:
        return str(obj)
    if hasattr(obj, "keys"):
        return {str(k): plain(obj[k], depth + 1) for k in obj.keys()}
    if isinstance(obj, (list, tuple)) or hasattr(obj, "__iter__"):
        return [plain(x, depth + 1) for x in obj]
    return str(obj)


def device_info(fw: Any) -> dict[str, Any]:
    """What ``_ANEDeviceInfo`` reports (None for a selector it lacks or that fails)."""
    cls = fw.cls("_ANEDeviceInfo")
    info: dict[str, Any] = {}
    for selector in DEVICE_INFO:
        try:
            with fw.pool():
                info[selector] = plain(getattr(cls, selector)())
        except Exception:  # a missing selector is an answer too: "not reported"
            info[selector] = None
    return info


def responds(fw: Any, class_name: str, kind: str, selector: str) -> bool:
    """Whether a class (``+``) or its instances (``-``) answer ``selector``, inherited too."""
    try:
        cls = fw.cls(class_name)
        ask = cls.respondsToSelector_ if kind == "+" else cls.instancesRespondToSelector_
        return bool(ask(selector))
    except Exception:  # no such class, or a proxy that cannot answer: it does not respond
        return False


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
        self.foreign_errors: tuple[type[BaseException], ...] = (objc.error,)

    # -- Objective-C objects -------------------------------------------------------------------
    def pool(self) -> contextlib.AbstractContextManager[Any]:
        """An autorelease pool: PyObjC drains none without a run loop (ANE_NOTES 2.5)."""
        return self._objc.autorelease_pool()

    def empty_options(self) -> Any:
        """A new immutable empty NSDictionary (the ``options:`` of compile, load and evaluate)."""
        return self._ns.NSDictionary.dictionary()

    def cls(self, name: str) -> Any:
        """An Objective-C class by name; BackendUnavailable if the framework lacks it."""
        try:
            return self._objc.lookUpClass(name)
        except self._objc.nosuchclass_error:
            raise BackendUnavailable(
                f"{FRAMEWORK_PATH} has no class {name}", backend="ane"
            ) from None

    def selector_metadata(self, class_name: str, selector: str) -> dict[str, Any]:
        """PyObjC's ``__metadata__()`` of ``selector`` on a class (its instance method)."""
        return getattr(self.cls(class_name), selector.replace(":", "_")).__metadata__()

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

    # -- Metal (the optional ``metal`` extra) ---------------------------------------------------
    def metal_device(self) -> Any:
        """The default ``MTLDevice``; BackendUnavailable without pyobjc-framework-Metal or a GPU."""
        device = _metal().MTLCreateSystemDefaultDevice()
        if device is None:
            raise BackendUnavailable("MTLCreateSystemDefaultDevice() returned nil: no Metal GPU")
        return device

    def metal_buffer(self, surface: Any, device: Any) -> tuple[Any, memoryview]:
        """An ``MTLBuffer`` over all of ``surface``'s memory, without copying, and its contents.

        ``newBufferWithBytesNoCopy:`` wants page-aligned memory of whole pages; an IOSurface's
        memory is both (its allocation is whole VM pages), so the length is the allocation
        rounded up to the page size.
        """
        metal = _metal()
        page = os.sysconf("SC_PAGE_SIZE")
        length = -(-int(self._ios.IOSurfaceGetAllocSize(surface)) // page) * page
        memory = self._ios.IOSurfaceGetBaseAddress(surface).as_buffer(length)
        buffer = device.newBufferWithBytesNoCopy_length_options_deallocator_(
            memory, length, metal.MTLResourceStorageModeShared, None
        )
        if buffer is None:
            raise EvaluationError(f"newBufferWithBytesNoCopy refused a {length}-byte IOSurface")
        return buffer, buffer.contents().as_buffer(int(buffer.length()))

    # -- experiments (anekit probe) ------------------------------------------------------------
    def error_out(self, class_name: str, selector: str) -> None:
        """Mark the trailing ``NSError**`` of ``selector`` an out-parameter, so calls return
        ``(result, error)`` (the selectors of ERROR_SELECTORS are marked at load)."""
        _register_error_metadata(self._objc, {class_name: (selector,)})

    def map_mutable_weights(
        self, client: Any, model: Any, procedure: Any, max_bytes: int
    ) -> tuple[bool, memoryview | None, Any]:
        """``-[_ANEClient mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:]``.

        Its ``void**`` and ``uint64_t*`` out-parameters have no PyObjC metadata, so it is sent
        through ``objc_msgSend`` (type encoding ``B56@0:8@16@24^^v32^Q40^@48``). Returns
        (ok, the mapped memory or None, NSError or None); more than ``max_bytes`` is refused.
        """
        objc, vp = self._objc, ctypes.c_void_p
        if isinstance(procedure, str):
            procedure = self._ns.NSString.stringWithString_(procedure)
        send = ctypes.CDLL("/usr/lib/libobjc.A.dylib").objc_msgSend
        send.restype = ctypes.c_bool
        send.argtypes = [vp, vp, vp, vp, ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_uint64),
                         ctypes.POINTER(vp)]  # fmt: skip
        selector = _sel(b"mapMutableWeightsForModel:andProcedure:mappedWeightsBuffer:size:error:")
        pointer, size, error = vp(), ctypes.c_uint64(), vp()
        ok = send(_pointer(objc, client), selector, _pointer(objc, model),
                  _pointer(objc, procedure), ctypes.byref(pointer), ctypes.byref(size),
                  ctypes.byref(error))  # fmt: skip
        error_obj = objc.objc_object(c_void_p=error.value) if error.value else None
        if not ok or not pointer.value:
            return False, None, error_obj
        if size.value > max_bytes:
            raise EvaluationError(f"the mapped weights are {size.value} bytes, over {max_bytes}")
        array = (ctypes.c_char * size.value).from_address(pointer.value)
        return True, memoryview(array).cast("B"), error_obj

    # -- runtime introspection ------------------------------------------------------------------
    def class_names(self) -> list[str]:
        """Every Objective-C class the framework image defines."""
        return _runtime().class_names(b"_ANEClient")

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        """``(kind, selector, type encoding)`` of a class; kind is ``+`` (class) or ``-``."""
        return _runtime().methods(class_name.encode())


def _metal() -> Any:
    """PyObjC's Metal wrapper (the optional ``metal`` extra), imported on first use."""
    try:
        import Metal
    except ImportError as e:
        raise BackendUnavailable(
            f"pyobjc-framework-Metal is not installed ({e}); {METAL_HINT}"
        ) from e
    return Metal


def _pointer(objc: Any, obj: Any) -> int:
    """The Objective-C pointer behind a PyObjC value for ``objc_msgSend``.

    PyObjC bridges NSString and NSNumber results to Python ``str``/``int`` subclasses, which
    ``objc.pyobjc_id`` refuses with a TypeError (the mutable-weights probe's "name" variant
    did): the proxy is ``.nsstring()`` of a bridged string, ``__pyobjc_object__`` of a number.
    """
    if isinstance(obj, str) and hasattr(obj, "nsstring"):
        obj = obj.nsstring()
    return int(objc.pyobjc_id(getattr(obj, "__pyobjc_object__", obj)))


def _sel(name: bytes) -> int:
    """A selector's runtime pointer (``sel_registerName``)."""
    fn = ctypes.CDLL("/usr/lib/libobjc.A.dylib").sel_registerName
    fn.restype, fn.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    return int(fn(name))


def _register_error_metadata(
    objc: Any, table: dict[str, tuple[str, ...]] = ERROR_SELECTORS
) -> None:
    for class_name, selectors in table.items():
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
