"""`rousseau service`: the daemon as a systemd service, for one user or for the whole machine.

The unit is built here from the directives of the shipped `systemd/rousseau.service` (a test
keeps the two the same), pointed at this Python, this config and the folders the config names.
A user manager may mount and drop capabilities only inside a user namespace of its own, so a
user unit adds PrivateUsers= and adapts the few directives it cannot honour, saying why in the
file it writes.
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli.common import fail

if TYPE_CHECKING:
    from rousseau.config import Config

UNIT = "rousseau.service"
SYSTEM_USER = "rousseau"
"""The account a system unit runs as (deploy/install.sh creates it)."""
SYSTEM_HOME = Path("/var/lib/rousseau")
"""Its home, state folder and working directory (StateDirectory=rousseau)."""
SYSTEM_UNITS = Path("/etc/systemd/system")
HIDDEN_HOMES = (Path("/home"), Path("/root"), Path("/run/user"))
"""What ProtectHome=yes makes empty for a system unit."""

HARDENING: tuple[tuple[str, str], ...] = (
    ("NoNewPrivileges", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectHome", "yes"),
    ("PrivateTmp", "yes"),
    ("PrivateDevices", "yes"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictNamespaces", "yes"),
    ("LockPersonality", "yes"),
    ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
    ("CapabilityBoundingSet", ""),
    ("AmbientCapabilities", ""),
    ("SystemCallArchitectures", "native"),
    ("UMask", "0077"),
)
"""The sandbox of systemd/rousseau.service, in its order: the agent's tools run in it."""

LIMITS: tuple[tuple[str, str], ...] = (("MemoryMax", "1G"), ("TasksMax", "512"))

USER_UNIT_CHANGES: dict[str, tuple[str | None, str]] = {
    "ProtectHome": (
        "read-only",
        "ProtectHome=yes would hide your home, where the config, the state and this Python\n"
        "usually are: it is read-only instead, and the folders below are writable.",
    ),
    "ProtectControlGroups": (
        None,
        "No ProtectControlGroups=: systemd.exec(5) supports it in system units only.",
    ),
}
"""How a user unit departs from HARDENING: the new value (None: left out) and why."""


@dataclass(kw_only=True, slots=True)
class Layout:
    """What a unit points at, as the service will see it."""

    system: bool
    """A unit for the whole machine (run as SYSTEM_USER) rather than for one user."""
    python: str
    """The interpreter that runs `-m rousseau`."""
    config: Path
    """The config file, absolute."""
    state_dir: Path
    """The folder of the store: the working directory."""
    writable: list[Path]
    """The folders the daemon writes (state, workspace, ...), absolute, none inside another."""
    shutdown_grace: float = 30.0
    """The config's shutdown_grace; systemd's stop timeout leaves a margin past it."""

    @property
    def env_file(self) -> Path:
        """Secrets for the service's environment, beside the config (optional)."""
        return self.config.parent / "rousseau.env"

    def command(self) -> list[str]:
        return [self.python, "-m", "rousseau", "--config", str(self.config), "run"]


def render(layout: Layout) -> str:
    """The unit file for `layout`."""
    system = layout.system
    scope = "system" if system else "user"
    lines = [
        f"# rousseau as a hardened systemd {scope} service, written by `rousseau service install`.",
        "# Settings live in the config file below; run the install again (with --force) after",
        f"# moving it or this Python. Secrets may go in {layout.env_file} (mode 0600).",
        "[Unit]",
        "Description=rousseau chat-agent daemon",
    ]
    if system:
        lines += ["After=network-online.target", "Wants=network-online.target"]
    else:
        lines += [
            "# No After=network-online.target: a user manager cannot order itself after system",
            "# units; the transports retry until the network is up.",
        ]
    lines += ["", "[Service]", "Type=notify", "NotifyAccess=main"]
    if system:
        lines += [f"User={SYSTEM_USER}", f"Group={SYSTEM_USER}"]
    else:
        lines.append("# No User=/Group=: a user manager runs its services as you.")
    lines += [
        "ExecStart=" + " ".join(_word(arg, command=True) for arg in layout.command()),
        "# `systemctl reload` applies a changed config file (what `rousseau reload` does).",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"EnvironmentFile=-{_specifiers(str(layout.env_file))}",
        "Environment=PYTHONUNBUFFERED=1",
    ]
    if system:
        lines.append(f"Environment=HOME={SYSTEM_HOME}")
    grace = math.ceil(layout.shutdown_grace)
    lines += [
        f"WorkingDirectory={_specifiers(str(layout.state_dir))}",
        "Restart=on-failure",
        "RestartSec=5s",
        "# The daemon pings the watchdog at half this interval; a hung loop gets restarted.",
        "WatchdogSec=60s",
        f"# SIGTERM: in-flight turns get shutdown_grace ({grace}s) to finish.",
        f"TimeoutStopSec={max(45, grace + 15)}s",
        "KillMode=mixed",
        "",
        "# Hardening: the agent's tools run here, so give it as little as the job needs.",
    ]
    if not system:
        lines += [
            "# A user manager can sandbox only inside a user namespace of its own, where other",
            "# users' files appear owned by nobody.",
            "PrivateUsers=yes",
        ]
    for key, value in HARDENING:
        if not system and key in USER_UNIT_CHANGES:
            changed, why = USER_UNIT_CHANGES[key]
            lines += [f"# {line}" for line in why.splitlines()]
            if changed is not None:
                lines.append(f"{key}={changed}")
        else:
            lines.append(f"{key}={value}")
    lines.append("# State (sessions.db) and the agent's workspace are the only writable places.")
    if system:
        lines.append("StateDirectory=rousseau")
    else:
        lines.append("# No StateDirectory=: the state lives where the config's state.path says.")
    lines.append("ReadWritePaths=" + " ".join(_word(str(p)) for p in layout.writable))
    lines += [f"{key}={value}" for key, value in LIMITS]
    lines += ["", "[Install]", f"WantedBy={'multi-user.target' if system else 'default.target'}"]
    return "\n".join(lines) + "\n"


def _specifiers(text: str) -> str:
    return text.replace("%", "%%")


def _word(text: str, *, command: bool = False) -> str:
    """`text` as one word of a unit line, quoted when it holds spaces or quotes."""
    text = _specifiers(text)
    if command:
        text = text.replace("$", "$$")
    if text and not any(c.isspace() or c in "\"'\\;" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- the command ----------------------------------------------------------------------------


def service(args: argparse.Namespace) -> int:
    system = os.geteuid() == 0 if args.system is None else bool(args.system)
    actions: dict[str, Callable[[argparse.Namespace, bool], int]] = {
        "install": _install,
        "uninstall": _uninstall,
        "start": _control,
        "stop": _control,
        "restart": _control,
        "status": _status,
        "logs": _logs,
    }
    return actions[args.action](args, system)


def _install(args: argparse.Namespace, system: bool) -> int:
    from rousseau.config import load_config

    config_file = _config_file(args)
    if not config_file.is_file():
        fail(f"no config file at {config_file}: write one with `rousseau init`, or pass --config")
        return 1
    config = load_config(str(config_file))
    layout = _layout(config, config_file, system)
    text = render(layout)
    if args.dry_run:
        print(text, end="")
        return 0
    if system and os.geteuid() != 0:
        fail(_needs_root("install", "--config", str(config_file)))
        return 1
    path = _unit_path(system)
    current = path.read_text(encoding="utf-8") if path.exists() else None
    if current not in (None, text) and not args.force:
        fail(f"{path} differs from the unit this would write; --force replaces it")
        return 1
    try:
        _make_folders(layout)
        if current != text:
            _write(path, text)
    except OSError as exc:
        fail(f"cannot write {exc.filename or path}: {exc.strerror}")
        return 1
    print(f"{path} is up to date" if current == text else f"wrote {path}")
    why = _no_systemd(system)
    if why is not None:
        fail(f"{why}, so the unit is not enabled; run the daemon in the foreground until it is:")
        print(shlex.join(layout.command()))
        return 0
    for step in (["daemon-reload"], ["enable", UNIT]):
        problem = _systemctl(system, *step)
        if problem is not None:
            fail(problem)
            return 1
    flag = _flag(system)
    print(f"enabled; start it now with `rousseau service start{flag}`")
    if not system:
        _linger_hint()
    return 0


def _uninstall(args: argparse.Namespace, system: bool) -> int:
    if system and os.geteuid() != 0:
        fail(_needs_root("uninstall"))
        return 1
    path = _unit_path(system)
    if not path.exists():
        print(f"no unit at {path}; nothing to remove")
        return 0
    why = _no_systemd(system)
    if why is None:
        problem = _systemctl(system, "disable", "--now", UNIT)
        if problem is not None:
            fail(problem)
            return 1
    try:
        path.unlink()
        for wants in ("default.target.wants", "multi-user.target.wants"):
            link = path.parent / wants / UNIT  # left by an enable made while systemd was away
            if link.is_symlink():
                link.unlink()
    except OSError as exc:
        fail(f"cannot remove {exc.filename or path}: {exc.strerror}")
        return 1
    print(f"removed {path}")
    if why is not None:
        fail(f"{why}, so only the unit file was removed")
        return 0
    problem = _systemctl(system, "daemon-reload")
    if problem is not None:
        fail(problem)
        return 1
    return 0


def _control(args: argparse.Namespace, system: bool) -> int:
    if not _systemd_here(args, system):
        return 1
    problem = _systemctl(system, args.action, UNIT)
    if problem is not None:
        fail(problem)
        return 1
    print(f"{UNIT}: {'stopped' if args.action == 'stop' else args.action + 'ed'}")
    return 0


def _status(args: argparse.Namespace, system: bool) -> int:
    why = _no_systemd(system, "systemctl")
    if why is not None:  # no service to ask about; whether a daemon runs is still known
        return _status_without_systemd(args, why)
    scope = [] if system else ["--user"]
    return subprocess.run(["systemctl", *scope, "status", UNIT, "--no-pager"]).returncode


def _logs(args: argparse.Namespace, system: bool) -> int:
    if args.lines < 0:
        fail(f"--lines must be 0 or more, not {args.lines}")
        return 2
    if not _systemd_here(args, system, "journalctl"):
        return 1
    unit = ["-u", UNIT] if system else ["--user-unit", UNIT]
    follow = ["-f"] if args.follow else []
    return subprocess.run(["journalctl", *unit, "-n", str(args.lines), *follow]).returncode


def _status_without_systemd(args: argparse.Namespace, why: str) -> int:
    """Whether a daemon runs on the configured state, as `systemctl status` would say it:
    exit 0 running, 3 not running."""
    from rousseau.cli.common import load
    from rousseau.cli.status import daemon_status

    fail(f"{why}; whether a daemon runs on this configuration's state:")
    running = daemon_status(load(args).state.path)
    if not running:
        print(f"to run it in the foreground: {_foreground(args)}")
    return 0 if running else 3


# -- helpers --------------------------------------------------------------------------------


def _config_file(args: argparse.Namespace) -> Path:
    from rousseau.config import config_path

    return config_path(args.config, os.environ)[0].absolute()


def _layout(config: Config, config_file: Path, system: bool) -> Layout:
    """Where the service finds and keeps things, with `~` as the service's own home."""
    from rousseau.agent.errors import ConfigError, RousseauError

    home = SYSTEM_HOME if system else Path.home()

    def where(value: str) -> Path:
        if value == "~" or value.startswith("~/"):
            return home.joinpath(value[2:])
        return Path(value).expanduser()

    state = where(config.state.path)
    if not state.is_absolute():
        raise ConfigError(f"state.path: a service needs an absolute path (or ~/...), not {state}")
    writable = [state.parent, state.parent / where(config.agent.workspace)]
    if config.whatsapp is not None:
        writable.append(state.parent / where(config.whatsapp.store).parent)
    if system:
        writable.insert(0, SYSTEM_HOME)
    layout = Layout(
        system=system,
        python=sys.executable,
        config=config_file,
        state_dir=state.parent,
        writable=_outermost(writable),
        shutdown_grace=config.shutdown_grace,
    )
    needed = [Path(layout.python), layout.config, *layout.writable]
    if any("\n" in str(path) for path in needed):
        raise ConfigError("a unit file cannot name a path with a line break in it")
    hidden = [p for p in needed if system and any(p.is_relative_to(h) for h in HIDDEN_HOMES)]
    if hidden:
        raise RousseauError(
            f"{hidden[0]} is in a home folder, which ProtectHome= hides from a system service: "
            "keep the config in /etc/rousseau, the state in /var/lib/rousseau and rousseau in "
            "/opt (deploy/install.sh), or install a user unit with --user"
        )
    return layout


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The distinct folders of `paths`, without those inside another one."""
    unique = sorted({Path(os.path.normpath(p)) for p in paths})
    return [p for p in unique if not any(p != q and p.is_relative_to(q) for q in unique)]


def _unit_path(system: bool) -> Path:
    if system:
        return SYSTEM_UNITS / UNIT
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".config"
    return base / "systemd" / "user" / UNIT


def _make_folders(layout: Layout) -> None:
    """The working directory and ReadWritePaths= must exist when the service starts; those
    made for a system unit belong to its user."""
    owner = None
    if layout.system:
        import pwd

        try:
            entry = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            from rousseau.agent.errors import RousseauError

            raise RousseauError(
                f"a system unit runs as the user {SYSTEM_USER}, who does not exist: "
                f"useradd --system --home {SYSTEM_HOME} --shell /usr/sbin/nologin {SYSTEM_USER}"
            ) from None
        owner = (entry.pw_uid, entry.pw_gid)
    for folder in [layout.state_dir, *layout.writable]:
        missing = [folder, *folder.parents]
        for made in reversed([p for p in missing if not p.exists()]):
            made.mkdir(mode=0o700)
            if owner is not None:
                os.chown(made, *owner)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text, encoding="utf-8")
    partial.chmod(0o644)
    os.replace(partial, path)


def _no_systemd(system: bool, program: str = "systemctl") -> str | None:
    """Why `program` cannot reach the service manager here, or None when it can: systemctl
    itself talks to a user manager through $XDG_RUNTIME_DIR/systemd/private."""
    if shutil.which(program) is None:
        return f"systemd is not available here (no {program} on PATH)"
    if system:
        if not Path("/run/systemd/system").is_dir():
            return "systemd is not running here (no /run/systemd/system)"
        return None
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not runtime or not Path(runtime, "systemd", "private").exists():
        return "no systemd user manager is running for you (no $XDG_RUNTIME_DIR/systemd/private)"
    return None


def _systemd_here(args: argparse.Namespace, system: bool, program: str = "systemctl") -> bool:
    """True when systemd can be asked; else say why in one line and print the foreground
    command that runs the daemon without it."""
    why = _no_systemd(system, program)
    if why is None:
        return True
    fail(f"{why}; run the daemon in the foreground instead:")
    print(_foreground(args))
    return False


def _foreground(args: argparse.Namespace) -> str:
    """The command that runs the daemon without systemd."""
    config = str(_config_file(args))
    return shlex.join([sys.executable, "-m", "rousseau", "--config", config, "run"])


def _systemctl(system: bool, *args: str) -> str | None:
    """Run systemctl: None when it succeeded, else what went wrong, in one line."""
    argv = ["systemctl", *([] if system else ["--user"]), *args]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode == 0:
        return None
    said = " ".join(line.strip() for line in (result.stderr + result.stdout).splitlines())
    return f"{shlex.join(argv)} failed: {' '.join(said.split()) or f'exit {result.returncode}'}"


def _flag(system: bool) -> str:
    """The scope option a later command needs, when it is not the default."""
    root = os.geteuid() == 0
    return "" if system == root else (" --system" if system else " --user")


def _needs_root(action: str, *options: str) -> str:
    again = [sys.executable, "-m", "rousseau", *options, "service", action, "--system"]
    return f"a system unit needs root: sudo {shlex.join(again)}"


def _linger_hint() -> None:
    import pwd

    name = pwd.getpwuid(os.getuid()).pw_name
    if not Path("/var/lib/systemd/linger", name).exists():
        print(
            "it runs while you are logged in; to keep it running after you log out and start "
            f"it at boot: loginctl enable-linger {name}"
        )
