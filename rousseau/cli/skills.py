"""`rousseau skills`: the skills found in agent.skills_dir."""

from __future__ import annotations

import argparse

from rousseau.cli.common import load


def list_skills(args: argparse.Namespace) -> int:
    from rousseau.skills import Skills

    skills = Skills(load(args, quiet=False).agent.skills_dir)
    found = skills.load()
    if not found:
        print(f"no skills in {skills.folder}")
    for skill in found:
        triggers = ", ".join(skill.triggers) or "(none: never used)"
        print(f"{skill.name}  [{triggers}]  {skill.description}")
    return 0


def show(args: argparse.Namespace) -> int:
    from rousseau.agent import RousseauError
    from rousseau.skills import Skills

    skill = Skills(load(args).agent.skills_dir).get(args.name)
    if skill is None:
        raise RousseauError(f"no skill named {args.name!r} (see: rousseau skills list)")
    print(f"# {skill.name} ({skill.path})\ntriggers: {', '.join(skill.triggers)}\n")
    print(skill.body)
    return 0
