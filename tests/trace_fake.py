"""A stand-in for the Objective-C runtime, for the tracer's contract test.

Classes are method tables (``(kind, selector) -> implementation``); sending a message
looks the selector up in the receiver's table, as ``objc_msgSend`` does. ``swizzle``
does what the real runtime seam does: add a method under the alias name, then exchange
the two implementations; ``restore`` exchanges them back. So after a trace the table
holds exactly the implementations it held before, which the test checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from anekit.probe.runtime import Swizzle, alias


class FakeClass:
    def __init__(self, name: str, methods: dict[tuple[str, str], tuple[str, Callable]]) -> None:
        self.name = name
        self.encodings = {key: enc for key, (enc, _) in methods.items()}
        self.table = {key: impl for key, (_, impl) in methods.items()}

    def send(self, selector: str, *args: Any) -> Any:
        return self.table[("+", selector)](self, *args)

    def new(self) -> FakeObject:
        return FakeObject(self)


class FakeObject:
    def __init__(self, cls: FakeClass) -> None:
        self.cls = cls

    def send(self, selector: str, *args: Any) -> Any:
        return self.cls.table[("-", selector)](self, *args)


class FakeRuntime:
    def __init__(self, *classes: FakeClass) -> None:
        self.classes = {c.name: c for c in classes}
        self.swizzled: list[Swizzle] = []
        self.fail_on: str | None = None  # a selector whose swizzle fails (install rollback)

    def methods(self, class_name: str) -> list[tuple[str, str, str]]:
        cls = self.classes[class_name]
        return sorted((kind, sel, enc) for (kind, sel), enc in cls.encodings.items())

    def swizzle(self, class_name: str, kind: str, selector: str, enc: str,
                around: Callable[..., Any]) -> Swizzle:  # fmt: skip
        if selector == self.fail_on:
            raise RuntimeError(f"cannot add a method for {selector}")
        cls, name = self.classes[class_name], alias(selector)

        def wrapper(receiver: Any, *args: Any) -> Any:
            return around(lambda r, *a: r.send(name, *a), receiver, args)

        cls.table[(kind, name)] = wrapper  # class_addMethod
        handle = Swizzle(class_name, kind, selector, name)
        self._exchange(handle)
        self.swizzled.append(handle)
        return handle

    def restore(self, handle: Swizzle) -> None:
        self._exchange(handle)
        self.swizzled.remove(handle)

    def _exchange(self, h: Swizzle) -> None:
        table = self.classes[h.class_name].table
        a, b = (h.kind, h.selector), (h.kind, h.alias)
        table[a], table[b] = table[b], table[a]


def _compile(self: FakeObject, qos: int, options: dict, error: Any) -> tuple[bool, None]:
    time.sleep(0.01)
    self.send("setPerfStatsMask:", 15)  # a nested message, as real methods send
    return True, None


def _fail(self: FakeObject, qos: int, error: Any) -> tuple[bool, None]:
    raise ValueError("unload refused")


def make_classes() -> tuple[FakeClass, FakeClass]:
    """``_ANEClient`` (class methods) and ``_ANEInMemoryModel`` (instance methods)."""
    client = FakeClass("_ANEClient", {
        ("+", "sharedConnection"): ("@16@0:8", lambda cls: "connection"),
        ("+", "echo:"): ("B24@0:8@16", lambda cls, text: text == "ping"),
        ("+", "description"): ("@16@0:8", lambda cls: "<_ANEClient>"),
    })  # fmt: skip
    model = FakeClass("_ANEInMemoryModel", {
        ("-", "compileWithQoS:options:error:"): ("B40@0:8I16@20^@28", _compile),
        ("-", "setPerfStatsMask:"): ("v20@0:8I16", lambda self, mask: None),
        ("-", "unloadWithQoS:error:"): ("B28@0:8I16^@20", _fail),
        ("-", "programHandle"): ("Q16@0:8", lambda self: 42),
        ("-", "frame"): ("{CGRect={CGPoint=dd}{CGSize=dd}}16@0:8", lambda self: None),
        ("-", "bytes"): ("^v16@0:8", lambda self: None),
        ("-", "dealloc"): ("v16@0:8", lambda self: None),
        ("-", "initWithDescriptor:"): ("@24@0:8@16", lambda self, d: self),
        ("-", "evaluateWithCompletion:"): ("v24@0:8@?16", lambda self, block: None),
        ("-", "identifierWithError:"): ("@24@0:8^@16", lambda self, error: ("x", None)),
    })  # fmt: skip
    return client, model


CLIENT, MODEL = make_classes()
RUNTIME = FakeRuntime(CLIENT, MODEL)  # the one a traced script in the tests reaches
