"""The configuration reference, generated from the config model so it cannot drift from it.

It is written into docs/configuration.md, between its two markers, by
`python -m rousseau.docgen docs/configuration.md`; a test fails while the page differs from
what the model makes, and on a key without a description.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from rousseau.config import SECRET_ENV, Config, parse_duration


class UndocumentedKey(ValueError):
    pass


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models(arg)
    return found


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (types.UnionType, typing.Union):
        parts = [_type(a) for a in args if a is not type(None)]
        return " \\| ".join(parts) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[1])}"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        value: Any = field.default_factory()  # type: ignore[call-arg]
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def keys(
    model: type[BaseModel] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    """Every key of the model (default: the whole Config), depth first, as (path, field)."""
    for path, field, _ in _documented(model or Config, prefix):
        yield path, field


def _documented(
    model: type[BaseModel], prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], FieldInfo, str]]:
    """(path, field, description) of every key, depth first."""
    docs = attribute_docstrings(model)
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        path = (*prefix, field.alias or name)
        yield path, field, field.description or docs.get(name, "")
        nested = _models(field.annotation)
        if nested:
            inner = (*path, "NAME") if typing.get_origin(field.annotation) is dict else path
            yield from _documented(nested[0], inner)


@functools.cache
def attribute_docstrings(model: type) -> dict[str, str]:
    """The string under each field of a class and its bases, read from their source here
    rather than by pydantic at every start (use_attribute_docstrings costs the daemon's
    start-up a fifth of its config import)."""
    found: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not issubclass(cls, BaseModel) or cls is BaseModel:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):  # no source (built at run time): nothing to read
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for first, second in itertools.pairwise(body):
            if (
                isinstance(first, ast.AnnAssign)
                and isinstance(first.target, ast.Name)
                and isinstance(second, ast.Expr)
                and isinstance(second.value, ast.Constant)
                and isinstance(second.value.value, str)
            ):
                found[first.target.id] = inspect.cleandoc(second.value.value)
    return found


def _env(path: tuple[str, ...]) -> str:
    if "NAME" in path or len(path) > 3:
        return ""
    names = ["ROUSSEAU_" + "_".join(path).upper()]
    names += [var for var, target in SECRET_ENV.items() if target == path]
    return ", ".join(f"`{n}`" for n in names)


def config_reference() -> str:
    """Markdown tables of every key: type, default, environment variables, description."""
    sections: dict[str, list[str]] = {}
    for path, field, description in _documented(Config, ()):
        if not description:
            raise UndocumentedKey(f"config key {'.'.join(path)} has no description")
        if len(path) == 1 and _models(field.annotation):
            sections.setdefault(path[0], []).insert(0, description)
            continue
        top = path[0] if len(path) > 1 else "(top level)"
        kind = _type(field.annotation)
        if any(getattr(m, "func", None) is parse_duration for m in field.metadata):
            kind = "duration" + (" or null" if "null" in kind else "")
        row = (
            f"| `{'.'.join(path[1:]) if len(path) > 1 else path[0]}` | {kind}"
            f" | {_default(field)} | {_env(path)} | {' '.join(description.split())} |"
        )
        sections.setdefault(top, []).append(row)
    out: list[str] = []
    for section, lines in sections.items():
        out.append(f"## {section}\n")
        rows = [line for line in lines if line.startswith("|")]
        intro = [line for line in lines if not line.startswith("|")]
        out += [*intro, ""] if intro else []
        if rows:
            out += ["| Key | Type | Default | Environment | Description |", "|---|---|---|---|---|"]
            out += rows
        out.append("")
    return "\n".join(out)


BEGIN, END = "<!-- config-reference -->", "<!-- /config-reference -->"


def with_reference(page: str) -> str:
    """The page with the reference between its markers made anew from the model."""
    head, begin, rest = page.partition(BEGIN)
    _, end, tail = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no {BEGIN} ... {END} markers")
    return f"{head}{BEGIN}\n\n{config_reference()}\n{END}{tail}"


if __name__ == "__main__":
    import sys
    from pathlib import Path

    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(with_reference(path.read_text()))
