"""Skills: markdown files whose body joins the system prompt on turns that mention them.

A skill is `NAME.md` (or `NAME/SKILL.md`, the common convention) in `agent.skills_dir`, with
YAML front-matter:

    ---
    name: invoices
    description: How we file invoices
    triggers: [invoice, billing]
    ---
    Body: instructions for the model.

Other front-matter keys are ignored. A file that cannot be read is skipped with a warning
naming it. Files are re-read when they change (checked at most once a second).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import structlog

from rousseau.agent import Session
from rousseau.state.recall import last_user_text

log = structlog.get_logger("rousseau.skills")

RESCAN_EVERY = 1.0
MAX_BYTES = 256 * 1024


@dataclass(frozen=True, kw_only=True, slots=True)
class Skill:
    name: str
    description: str
    triggers: tuple[str, ...]
    body: str
    path: Path
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # one pattern for all triggers, whole words, made once per (re)read of the file
        words = "|".join(re.escape(t) for t in self.triggers)
        pattern = re.compile(rf"(?<!\w)(?:{words})(?!\w)", re.I) if words else None
        object.__setattr__(self, "_pattern", pattern)

    def matches(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None


class SkillError(ValueError):
    pass


def parse_skill(path: Path, text: str) -> Skill:
    """A skill from a file's text; raises SkillError saying what is wrong."""
    import yaml

    if not text.startswith("---"):
        raise SkillError("no front-matter (the file must start with ---)")
    _, sep, rest = text.partition("\n")
    head, sep, body = rest.partition("\n---")
    if not sep:
        raise SkillError("the front-matter is not closed with ---")
    try:
        meta: Any = yaml.safe_load(head)
    except yaml.YAMLError as exc:
        raise SkillError(f"bad front-matter: {' '.join(str(exc).split())}") from None
    if not isinstance(meta, dict):
        raise SkillError("the front-matter is not a mapping")
    name = meta.get("name") or (path.parent.name if path.name == "SKILL.md" else path.stem)
    triggers = meta.get("triggers", [])
    if isinstance(triggers, str):
        triggers = [triggers]
    if not isinstance(triggers, list) or not all(isinstance(t, str | int) for t in triggers):
        raise SkillError("triggers must be a list of words")
    description = meta.get("description", "")
    if not isinstance(name, str) or not isinstance(description, str):
        raise SkillError("name and description must be text")
    return Skill(
        name=name,
        description=description,
        triggers=tuple(str(t).strip() for t in triggers if str(t).strip()),
        body=body.partition("\n")[2].strip(),
        path=path,
    )


class Skills:
    """A SkillsProvider over a folder of skills."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()
        self._files: dict[Path, tuple[int, int, Skill | None]] = {}
        self._checked = 0.0

    def _paths(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted([*self.folder.glob("*.md"), *self.folder.glob("*/SKILL.md")])

    def load(self) -> list[Skill]:
        """Every readable skill, re-reading files that changed (blocking: call off the loop)."""
        seen: dict[Path, tuple[int, int, Skill | None]] = {}
        for path in self._paths():
            try:
                stat = path.stat()
            except OSError:
                continue
            known = self._files.get(path)
            if known is not None and known[:2] == (stat.st_mtime_ns, stat.st_size):
                seen[path] = known
                continue
            seen[path] = (stat.st_mtime_ns, stat.st_size, self._read(path, stat.st_size))
        self._files = seen
        self._checked = time.monotonic()
        return [s for _, _, s in seen.values() if s is not None]

    @staticmethod
    def _read(path: Path, size: int) -> Skill | None:
        try:
            if size > MAX_BYTES:
                raise SkillError(f"larger than {MAX_BYTES} bytes")
            return parse_skill(path, path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SkillError) as exc:
            log.warning("skills.skipped", file=str(path), error=str(exc))
            return None

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.load() if s.name == name), None)

    async def current(self) -> list[Skill]:
        if time.monotonic() - self._checked >= RESCAN_EVERY:
            return await anyio.to_thread.run_sync(self.load)
        return [s for _, _, s in self._files.values() if s is not None]

    async def appendix(self, session: Session) -> str:
        text = last_user_text(session)
        if not text:
            return ""
        chosen = [s for s in await self.current() if s.matches(text)]
        return "\n\n".join(f"## Skill: {s.name}\n{s.body}" for s in chosen if s.body)
