"""Every adapter has every member of the Transport protocol, in the protocol's shape: the
daemon and the CLI call them all without asking first."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rousseau.transports
from rousseau.agent import MissingExtraError
from rousseau.transports import TRANSPORTS
from rousseau.transports.base import Transport

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "custom_transport.py"
METHODS = ("bind_state", "run", "stop", "send", "typing", "check", "aclose")
DATA = {"name": str, "max_length": int}


def members(cls: type) -> set[str]:
    return {n for n in vars(cls) if not n.startswith("_")} | set(cls.__annotations__)


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("custom_transport_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def adapters() -> list[Any]:
    """A param per adapter class (`...Transport`) in rousseau/transports/ and the example's;
    a module whose SDK extra is missing is a skipped param that says so."""
    found: list[Any] = []
    for info in pkgutil.iter_modules(rousseau.transports.__path__):
        name = f"rousseau.transports.{info.name}"
        try:
            module = importlib.import_module(name)
        except MissingExtraError as exc:
            found.append(pytest.param(None, id=info.name, marks=pytest.mark.skip(reason=str(exc))))
            continue
        found += [
            pytest.param(cls, id=cls.__name__)
            for cls in vars(module).values()
            if inspect.isclass(cls)
            and cls.__module__ == name
            and cls.__name__.endswith("Transport")
            and cls is not Transport
        ]
    return [*found, pytest.param(example().ListTransport, id="examples.ListTransport")]


ADAPTERS = adapters()


def test_the_protocol_declares_what_the_daemon_calls() -> None:
    assert members(Transport) == {*METHODS, *DATA, "measure", "connected"}


def test_every_configurable_transport_has_an_adapter_here() -> None:
    missing = [p.id for p in ADAPTERS if p.values[0] is None]
    if missing:
        pytest.skip(f"not every extra is installed: {', '.join(missing)}")
    names = {getattr(p.values[0], "name", None) for p in ADAPTERS}
    assert set(TRANSPORTS) <= names


@pytest.mark.parametrize("cls", ADAPTERS)
def test_adapter_has_every_member_of_the_protocol(cls: type) -> None:
    hints = typing.get_type_hints(cls)
    for member, kind in DATA.items():
        value = inspect.getattr_static(cls, member, None)
        assert isinstance(value, kind) or hints.get(member) is kind, member
    connected = inspect.getattr_static(cls, "connected", None)
    assert isinstance(connected, property) or hints.get("connected") is bool
    assert cls.measure("añ😀") in (3, 4)  # type: ignore[attr-defined]  # characters or UTF-16
    for member in METHODS:
        assert callable(getattr(cls, member, None)), f"{cls.__name__} has no {member}"


@pytest.mark.parametrize("cls", ADAPTERS)
@pytest.mark.parametrize("member", METHODS)
def test_adapter_methods_have_the_protocol_signature(cls: type, member: str) -> None:
    ours, theirs = getattr(cls, member), getattr(Transport, member)
    assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs), member
    shape = [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(theirs).parameters.values()
    ]
    assert [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(ours).parameters.values()
    ] == shape
    assert typing.get_type_hints(ours) == typing.get_type_hints(theirs)
