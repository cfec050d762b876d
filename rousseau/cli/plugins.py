"""`rousseau plugins list`: the installed plugins, whether each loads, and whether the
configuration uses it."""

from __future__ import annotations

import argparse
import json

from rousseau.cli.common import load


def list_plugins(args: argparse.Namespace) -> int:
    from rousseau.plugins import PluginError, installed
    from rousseau.plugins import load as load_plugin

    config = load(args)
    rows = []
    for name, item in sorted(installed().items()):
        configured = config.plugins.get(name)
        if configured is not None:
            error = configured.error
        else:
            try:
                load_plugin(item)
                error = ""
            except PluginError as exc:
                error = str(exc)
        rows.append(
            {
                "name": name,
                "kind": item.kind,
                "package": item.package,
                "version": item.version,
                "target": item.target,
                "loaded": not error,
                "error": error,
                "configured": configured is not None,
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no plugins installed (a plugin is a package with an entry point in")
        print("rousseau.transports, rousseau.tools or rousseau.providers)")
        return 0
    for row in rows:
        state = "loaded" if row["loaded"] else f"failed: {row['error']}"
        used = "configured" if row["configured"] else "not configured"
        print(
            f"{row['name']:<16} {row['kind']:<9} {row['package']} {row['version']:<10}"
            f" {state}; {used}"
        )
    return 0
