"""The composition root: the one place that builds the parts from config, for `rousseau run`
(`assemble`, whose Parts the daemon supervises) and the commands (one agent, its approver,
tools and media).

Concrete adapters are chosen here by config name, each imported in its own branch by the
registries of transports and providers, so nothing here loads a vendor SDK.
"""

from rousseau.assembly.agent import (
    blob_store,
    build_agent,
    build_approver,
    build_compressor,
    build_registry,
    build_sandbox,
    connected_agent,
    media_intake,
)
from rousseau.assembly.parts import (
    VOICE_HINT,
    Parts,
    SupportsAclose,
    agent_config,
    assemble,
    build_router,
    stream_settings,
)

__all__ = [
    "VOICE_HINT",
    "Parts",
    "SupportsAclose",
    "agent_config",
    "assemble",
    "blob_store",
    "build_agent",
    "build_approver",
    "build_compressor",
    "build_registry",
    "build_router",
    "build_sandbox",
    "connected_agent",
    "media_intake",
    "stream_settings",
]
