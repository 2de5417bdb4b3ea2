"""Prompts as versioned files: a small header, then ``# system`` / ``# user`` sections.

A prompt file ``<id>.md`` looks like::

    ---
    id: relevance-judge
    version: 1
    description: one line
    variables: [query, context]
    ---
    # system
    ...
    # user
    ... {query} ... {context}

Placeholders are ``{name}``; literal braces are written ``{{`` and ``}}``. A user directory
(argument ``override_dir`` or the environment variable ``RAGBOUND_PROMPTS``, several joined by
the path separator) wins over the built-in file with the same id.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, cast

from ragbound.llm.base import ChatMessage, PromptError, Role

PROMPTS_ENV = "RAGBOUND_PROMPTS"
HEADER_KEYS = ("id", "version", "description", "variables")
ROLES: tuple[Role, ...] = ("system", "user", "assistant")
_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}\n]*)\}|[{}]")
_SECTION = re.compile(r"#\s*(system|user|assistant)\s*", re.IGNORECASE)

Segment = str | tuple[str]  # literal text, or (placeholder name,)


@dataclass(frozen=True)
class Template:
    """One message template: a role and its parsed segments."""

    role: Role
    segments: tuple[Segment, ...]

    def render(self, values: dict[str, str]) -> ChatMessage:
        """The message with each placeholder replaced by its value (values are not re-parsed)."""
        parts = [values[s[0]] if isinstance(s, tuple) else s for s in self.segments]
        return ChatMessage(role=self.role, content="".join(parts))


@dataclass(frozen=True)
class Prompt:
    """A loaded prompt: id, version, declared variables and message templates."""

    id: str
    version: int
    description: str
    variables: tuple[str, ...]
    templates: tuple[Template, ...]
    path: Path

    def render(self, **variables: object) -> list[ChatMessage]:
        """The chat messages with every declared variable filled in (``str(value)``)."""
        missing = [name for name in self.variables if name not in variables]
        unknown = sorted(set(variables) - set(self.variables))
        if missing or unknown:
            raise PromptError(
                f"prompt {self.id!r} v{self.version} ({self.path}): "
                + (f"missing variables {missing}; " if missing else "")
                + (f"unknown variables {unknown}; " if unknown else "")
                + f"expected exactly {list(self.variables)}"
            )
        values = {name: str(value) for name, value in variables.items()}
        return [template.render(values) for template in self.templates]


def _split_header(text: str, path: Path) -> tuple[list[str], list[str], int]:
    """Header lines, body lines and the 1-based line number where the body starts."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise PromptError(f"{path}:1: a prompt file must start with a '---' header line")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return lines[1:index], lines[index + 1 :], index + 2
    raise PromptError(f"{path}: the header opened on line 1 is never closed with '---'")


def _header_value(key: str, value: str, where: str) -> Any:
    if key == "version":
        if not value.isdigit():
            raise PromptError(f"{where}: version must be a whole number, got {value!r}")
        return int(value)
    if key == "variables":
        if not (value.startswith("[") and value.endswith("]")):
            raise PromptError(f"{where}: variables must be a list like [query, context]")
        names = [name.strip() for name in value[1:-1].split(",") if name.strip()]
        bad = [name for name in names if not _NAME.fullmatch(name)]
        if bad:
            raise PromptError(f"{where}: invalid variable names {bad}")
        return tuple(names)
    return value


def _parse_header(lines: list[str], path: Path) -> dict[str, Any]:
    header: dict[str, Any] = {}
    for number, line in enumerate(lines, start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key not in HEADER_KEYS:
            raise PromptError(
                f"{path}:{number}: expected 'key: value' with key one of {list(HEADER_KEYS)}"
            )
        header[key] = _header_value(key, value.strip(), f"{path}:{number}")
    absent = [key for key in ("id", "version", "variables") if key not in header]
    if absent:
        raise PromptError(f"{path}: the header lacks {absent}")
    return header


def _parse_segments(
    text: str, allowed: tuple[str, ...], path: Path, first_line: int
) -> tuple[Segment, ...]:
    """Split template text into literals and placeholders; check each placeholder."""
    segments: list[Segment] = []
    position = 0
    for match in _TOKEN.finditer(text):
        segments.append(text[position : match.start()])
        position = match.end()
        line = first_line + text.count("\n", 0, match.start())
        token = match.group(0)
        if token in ("{{", "}}"):
            segments.append(token[0])
        elif match.group(1) is None:
            raise PromptError(
                f"{path}:{line}: a lone {token!r}; write literal braces as '{{{{' and '}}}}'"
            )
        elif match.group(1) not in allowed:
            raise PromptError(
                f"{path}:{line}: placeholder {token} is not a declared variable; "
                f"declared: {list(allowed)} (literal braces are written '{{{{' and '}}}}')"
            )
        else:
            segments.append((match.group(1),))
    segments.append(text[position:])
    return tuple(segment for segment in segments if segment != "")


def _parse_sections(
    lines: list[str], first_line: int, allowed: tuple[str, ...], path: Path
) -> tuple[Template, ...]:
    sections: list[tuple[Role, int, list[str]]] = []
    for number, line in enumerate(lines, start=first_line):
        heading = _SECTION.fullmatch(line.strip())
        if heading:
            sections.append((cast(Role, heading.group(1).lower()), number + 1, []))
        elif sections:
            sections[-1][2].append(line)
        elif line.strip():
            raise PromptError(f"{path}:{number}: text before the first '# system' or '# user'")
    if not sections:
        raise PromptError(f"{path}: no '# system' / '# user' / '# assistant' section")
    return tuple(_template(role, start, body, allowed, path) for role, start, body in sections)


def _template(
    role: Role, start: int, body: list[str], allowed: tuple[str, ...], path: Path
) -> Template:
    while body and not body[0].strip():
        body, start = body[1:], start + 1
    text = "\n".join(body).rstrip()
    return Template(role, _parse_segments(text, allowed, path, start))


def load_prompt_file(path: Path) -> Prompt:
    """Load and check one prompt file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompt file {path}: {exc}") from exc
    header_lines, body, body_start = _split_header(text, path)
    header = _parse_header(header_lines, path)
    return Prompt(
        id=header["id"],
        version=header["version"],
        description=header.get("description", ""),
        variables=header["variables"],
        templates=_parse_sections(body, body_start, header["variables"], path),
        path=path,
    )


def builtin_dir() -> Path:
    """The folder of the prompts shipped with ragbound."""
    return Path(str(resources.files("ragbound.llm") / "prompts"))


def search_dirs(override_dir: Path | None = None) -> list[Path]:
    """Where prompts are looked up, first match wins: override, ``$RAGBOUND_PROMPTS``, built-in."""
    dirs = [Path(override_dir)] if override_dir is not None else []
    env = os.environ.get(PROMPTS_ENV, "")
    dirs += [Path(entry) for entry in env.split(os.pathsep) if entry]
    for folder in dirs:
        if not folder.is_dir():
            raise PromptError(f"prompt directory {folder} does not exist")
    return [*dirs, builtin_dir()]


def load_prompt(prompt_id: str, *, override_dir: Path | None = None) -> Prompt:
    """Load prompt ``prompt_id`` from ``<id>.md`` in the first search directory that has it."""
    if not _ID.fullmatch(prompt_id):
        raise PromptError(f"invalid prompt id {prompt_id!r}: use lowercase letters, digits, -._")
    dirs = search_dirs(override_dir)
    for folder in dirs:
        path = folder / f"{prompt_id}.md"
        if path.is_file():
            prompt = load_prompt_file(path)
            if prompt.id != prompt_id:
                raise PromptError(f"{path}: header id {prompt.id!r} does not match the file name")
            return prompt
    raise PromptError(
        f"unknown prompt {prompt_id!r}: no {prompt_id}.md in {[str(d) for d in dirs]}; "
        f"known: {list_prompts(override_dir=override_dir)}"
    )


def list_prompts(*, override_dir: Path | None = None) -> list[str]:
    """Ids of every prompt found in the search directories."""
    folders = search_dirs(override_dir)
    return sorted({path.stem for folder in folders for path in folder.glob("*.md")})


def builtin_examples(name: str) -> list[dict[str, Any]]:
    """In-context examples for ``synth-query`` from paper 1, Table 13: ``pubmed``, ``textbooks``."""
    path = builtin_dir() / "examples" / f"{name}.json"
    if not path.is_file():
        known = sorted(p.stem for p in (builtin_dir() / "examples").glob("*.json"))
        raise PromptError(f"unknown built-in examples {name!r}; known: {known}")
    return list(json.loads(path.read_text(encoding="utf-8")))


def format_examples(examples: list[dict[str, Any]]) -> str:
    """Examples as JSON objects separated by blank lines, for the ``examples`` variable."""
    return "\n\n".join(json.dumps(example, indent=1, ensure_ascii=False) for example in examples)
