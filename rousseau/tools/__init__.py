"""Tools the agent can use: the Registry, the Tool base class and the five built-ins."""

from __future__ import annotations

import os
from collections.abc import Iterable

from rousseau.tools.base import (
    DuplicateToolError,
    FunctionTool,
    OutsideWorkspaceError,
    Registry,
    Shared,
    Subset,
    Tool,
    Workspace,
    WorkspaceError,
    WorkspaceTool,
    function_tool,
    run_in_thread,
)
from rousseau.tools.bash import BashTool, scrubbed_environ
from rousseau.tools.edit import EditTool
from rousseau.tools.grep import GrepTool
from rousseau.tools.read import ReadTool
from rousseau.tools.sandbox import Sandbox, SandboxError
from rousseau.tools.write import WriteTool

__all__ = [
    "BashTool",
    "DuplicateToolError",
    "EditTool",
    "FunctionTool",
    "GrepTool",
    "OutsideWorkspaceError",
    "ReadTool",
    "Registry",
    "Sandbox",
    "SandboxError",
    "Shared",
    "Subset",
    "Tool",
    "Workspace",
    "WorkspaceError",
    "WorkspaceTool",
    "WriteTool",
    "builtin_registry",
    "function_tool",
    "run_in_thread",
    "scrubbed_environ",
]


def builtin_registry(
    workspace: str | os.PathLike[str] | Workspace,
    *,
    bash_timeout: float = 60.0,
    secrets: Iterable[str] = (),
    sandbox: Sandbox | None = None,
    bash_env: Iterable[str] = (),
) -> Registry:
    """A Registry with read, write, edit, grep and bash confined to `workspace` (bash in
    `sandbox`, if given; with the variables named in `bash_env` although they look secret)."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    return Registry(
        [
            ReadTool(ws),
            WriteTool(ws),
            EditTool(ws),
            GrepTool(ws),
            BashTool(
                ws,
                timeout=bash_timeout,
                env=scrubbed_environ(secrets=secrets, allow=bash_env),
                sandbox=sandbox,
            ),
        ]
    )
