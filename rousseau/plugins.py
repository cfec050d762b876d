"""Plugins: transports, tools and providers other packages add.

A package declares an entry point in one of `GROUPS`; its name is the config key of the
plugin's section (a top-level key, as `telegram:` is for a built-in transport) and its value
a `TransportPlugin`, `ToolPlugin` or `ProviderPlugin`. A plugin is imported only when its
section is in the configuration, validated by its own pydantic model (errors name the key as
built-in ones do), and built by the same code paths as the built-ins. A plugin that fails to
import, or was written for another `API_VERSION`, stops only itself, with one line.

The API a plugin is written against: this module's three descriptions, the `Transport`
protocol (`rousseau.transports.base`) and its abilities (`rousseau.transports.abilities`),
`Tool` (`rousseau.tools`) and `Provider` (`rousseau.agent`). `API_VERSION` changes when one
of them changes in a way an existing plugin would notice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# The types below name rousseau's classes in words, not imports: the config loads plugins,
# and this module must not pull the tools, transports or agent into the config's imports.

__all__ = [
    "API_VERSION",
    "GROUPS",
    "Configured",
    "Installed",
    "PluginError",
    "PluginSection",
    "ProviderPlugin",
    "ToolContext",
    "ToolPlugin",
    "TransportPlugin",
    "installed",
    "load",
]

API_VERSION = 1
"""The plugin API this rousseau offers; a plugin names the one it was written for."""

Kind = Literal["transport", "tool", "provider"]
GROUPS: dict[Kind, str] = {
    "transport": "rousseau.transports",
    "tool": "rousseau.tools",
    "provider": "rousseau.providers",
}


class PluginSection(BaseModel):
    """A base for a plugin's config section with no keys of its own (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class TransportPlugin:
    """A transport: `build` makes it from its validated section, whose model must subclass
    `rousseau.config.TransportConfig` (so allowlist, policy, require_mention and the rest
    work as for the built-ins)."""

    config: type[BaseModel]
    build: Callable[[Any], Any]
    """Returns a `rousseau.transports.base.Transport`."""
    api: int = API_VERSION


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """What a tool plugin's `build` is given beside its section."""

    workspace: Any
    """The agent's workspace, a `rousseau.tools.Workspace`: a tool touching files keeps to
    it (`Workspace.resolve`)."""
    agent: str
    """The agent the tools are made for."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolPlugin:
    """Tools: `build` makes them for one agent from the validated section. They are
    registered beside the built-ins, so an agent's `tools` list and its approver apply."""

    build: Callable[[Any, ToolContext], Iterable[Any]]
    """Returns `rousseau.tools.Tool`s."""
    config: type[BaseModel] = PluginSection
    api: int = API_VERSION


@dataclass(frozen=True, kw_only=True, slots=True)
class ProviderPlugin:
    """A model provider, chosen by `provider: NAME` (or in `fallback`, or an agent's
    `provider`); `build` makes it from the validated section. A `model` key in the section
    is what an agent's `model` replaces."""

    config: type[BaseModel]
    build: Callable[[Any], Any]
    """Returns a `rousseau.agent.Provider`."""
    api: int = API_VERSION


Plugin = TransportPlugin | ToolPlugin | ProviderPlugin
_TYPES: dict[Kind, type[Plugin]] = {
    "transport": TransportPlugin,
    "tool": ToolPlugin,
    "provider": ProviderPlugin,
}


class PluginError(Exception):
    """A plugin could not be loaded: one line saying why."""


@dataclass(frozen=True, slots=True)
class Installed:
    """One entry point of `GROUPS`, as installed (nothing of it imported)."""

    kind: Kind
    name: str
    """Its config key."""
    target: str
    """What it points at, module:attribute."""
    package: str
    version: str
    entry: EntryPoint = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Configured:
    """A plugin whose section is in the configuration: loaded and its section validated, or
    the one line saying why it could not be loaded (then it stays stopped)."""

    installed: Installed
    plugin: Plugin | None
    section: Any
    error: str = ""

    def make(self, *context: Any) -> Any:
        """What the plugin builds from its section (and `context`); PluginError, with the
        line saying why, when it did not load or its `build` fails in any way."""
        if self.plugin is None:
            raise PluginError(self.error)
        build: Any = self.plugin.build
        try:
            return build(self.section, *context)
        except Exception as exc:  # a plugin may fail in any way: it stops only itself
            raise PluginError(f"{type(exc).__name__}: {exc}") from exc


@functools.cache
def installed() -> Mapping[str, Installed]:
    """The installed plugins by config key (the first of a name wins), read from the
    packages' metadata once per process."""
    from importlib.metadata import entry_points

    found: dict[str, Installed] = {}
    for kind, group in GROUPS.items():
        for entry in entry_points(group=group):
            dist = entry.dist
            found.setdefault(
                entry.name,
                Installed(
                    kind=kind,
                    name=entry.name,
                    target=entry.value,
                    package=dist.name if dist is not None else "?",
                    version=dist.version if dist is not None else "?",
                    entry=entry,
                ),
            )
    return found


def load(item: Installed) -> Plugin:
    """Import `item` and check it is a plugin of its kind for this API; PluginError if not."""
    try:
        loaded = item.entry.load()
    except Exception as exc:  # a plugin's import may fail in any way: it stops only itself
        raise PluginError(f"cannot import {item.target}: {type(exc).__name__}: {exc}") from exc
    expected = _TYPES[item.kind]
    if not isinstance(loaded, expected):
        raise PluginError(f"{item.target} is a {type(loaded).__name__}, not a {expected.__name__}")
    if loaded.api != API_VERSION:
        raise PluginError(
            f"written for plugin API {loaded.api}; this rousseau offers {API_VERSION}"
        )
    return loaded
