"""Skills: front-matter, triggers on word boundaries, bad files skipped, changes picked up."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Message, Options, Request, Response, Session
from rousseau.agent.testing import FunctionProvider, text_reply
from rousseau.skills import Skills
from tests.helpers import ROUSSEAU

pytestmark = pytest.mark.anyio

INVOICES = """---
name: invoices
description: How we file invoices
triggers: [invoice, "billing run"]
license: MIT
---
File every invoice under /finance/YYYY.
"""


def session(text: str) -> Session:
    return Session(id="s", messages=[Message.user(text)])


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "invoices.md").write_text(INVOICES)
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "SKILL.md").write_text(
        "---\ndescription: Deploying\ntriggers: deploy\n---\nRun make deploy.\n"
    )
    return tmp_path


async def test_triggers_choose_skills_for_the_turn(folder: Path) -> None:
    skills = Skills(folder)
    assert await skills.appendix(session("Please send the INVOICE today")) == (
        "## Skill: invoices\nFile every invoice under /finance/YYYY."
    )
    assert "make deploy" in await skills.appendix(session("deploy it"))  # SKILL.md, named by folder
    assert "make deploy" in await skills.appendix(session("start the billing run and deploy"))
    for text in ("invoices are late", "redeploy", "billing", "nothing here"):
        assert await skills.appendix(session(text)) == "", text


async def test_bad_files_are_skipped_with_a_warning_naming_them(folder: Path) -> None:
    (folder / "broken.md").write_text("---\nname: [unclosed\n---\nbody\n")
    (folder / "plain.md").write_text("no front-matter at all")
    (folder / "open.md").write_text("---\nname: open\n")
    (folder / "badlist.md").write_text("---\ntriggers: {a: 1}\n---\nx\n")
    with capture_logs() as logs:
        names = sorted(s.name for s in Skills(folder).load())
    assert names == ["deploy", "invoices"]
    warned = sorted(Path(e["file"]).name for e in logs if e["event"] == "skills.skipped")
    assert warned == ["badlist.md", "broken.md", "open.md", "plain.md"]


async def test_changed_files_are_reread(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rousseau.skills.RESCAN_EVERY", 0.0)
    skills = Skills(folder)
    assert await skills.appendix(session("an invoice")) != ""
    path = folder / "invoices.md"
    path.write_text(INVOICES.replace("File every invoice", "Shred every invoice"))
    later = time.time() + 5
    os.utime(path, (later, later))
    assert "Shred every invoice" in await skills.appendix(session("an invoice"))
    path.unlink()
    assert await skills.appendix(session("an invoice")) == ""


async def test_the_skill_reaches_the_system_prompt(folder: Path) -> None:
    seen: list[str] = []

    def answer(request: Request) -> Response:
        seen.append(request.system or "")
        return text_reply("ok")

    agent = Agent(
        FunctionProvider(answer), options=Options(system_prompt="Base.", skills=Skills(folder))
    )
    await agent.reply(Session(id="a"), "file this invoice")
    await agent.reply(Session(id="b"), "hello")
    assert seen == ["Base.\n\n## Skill: invoices\nFile every invoice under /finance/YYYY.", "Base."]


def test_skills_cli(folder: Path, tmp_path: Path) -> None:
    import subprocess

    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "ROUSSEAU_AGENT_SKILLS_DIR": str(folder),
    }
    listed = subprocess.run([*ROUSSEAU, "skills", "list"], env=env, capture_output=True, text=True)
    assert "invoices  [invoice, billing run]  How we file invoices" in listed.stdout
    shown = subprocess.run(
        [*ROUSSEAU, "skills", "show", "invoices"], env=env, capture_output=True, text=True
    )
    assert "File every invoice" in shown.stdout
    missing = subprocess.run(
        [*ROUSSEAU, "skills", "show", "nope"], env=env, capture_output=True, text=True
    )
    assert missing.returncode == 1 and "no skill named 'nope'" in missing.stderr
