"""The composition root: the one place that builds the parts from config, for `rousseau run`
(`assemble`, whose Parts the daemon supervises) and the commands (one agent, its approver,
tools and media).

Providers are chosen by config name through their registry, which imports each vendor in
its own branch (the default one on a thread, while the transports start), so nothing here
loads a vendor SDK.
"""

from rousseau.assembly.agent import (
    SupportsAclose,
    blob_store,
    build_agent,
    build_approver,
    build_compressor,
    build_registry,
    build_sandbox,
    close_tools,
    connected_agent,
    media_intake,
    tool_files,
)
from rousseau.assembly.crew import agent_config
from rousseau.assembly.parts import (
    VOICE_HINT,
    Parts,
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
    "close_tools",
    "connected_agent",
    "media_intake",
    "stream_settings",
    "tool_files",
]
