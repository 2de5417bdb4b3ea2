"""``docs/cli.md``: the CLI reference, rendered from the commands themselves.

The long explanations live in each command's docstring (what ``--help`` shows); this module
walks the registered commands and writes them out as Markdown, so the reference can never
drift from the code. ``tests/cli/test_docs.py`` fails when ``docs/cli.md`` is stale.

Regenerate with::

    python -m ragbound.cli.docs > docs/cli.md
"""

from __future__ import annotations

import inspect
import sys
import typing
from typing import Any

import typer

HEADER = """# CLI reference

Every command of `ragbound`, with every option, written from the commands themselves
(`python -m ragbound.cli.docs > docs/cli.md`); `ragbound COMMAND --help` shows the same text.
Every command refuses bad input with one `error:` line on stderr (naming the file, line,
field or option) and exit status 2; Ctrl-C exits with 130. Long jobs show a progress bar when
stderr is a terminal, else a progress line every 30 seconds (`RAGBOUND_PROGRESS_SECONDS` sets
another interval); never with `--json`. Text from a file, a corpus or an argument (queries,
document names, tripwires) is printed with its control characters escaped (`\\x1b`, `\\n`):
no escape sequence reaches the terminal.

Query files (`--queries`, `--in-knowledge`, ...) are text with one query per line, or records
in `.jsonl`, `.json`, `.csv` or `.tsv`, whose query is `--field` (default: the first of
`query`, `question`, `text`, `prompt`). A file without a known extension is read by its
content: JSON lines, a JSON document, or text.
"""


def render(app: typer.Typer | None = None) -> str:
    """The whole reference as Markdown, commands in registration order."""
    if app is None:
        from ragbound.cli import app as default_app

        app = default_app
    root = typer.main.get_command(app)
    parts = [HEADER]
    for path, command in _walk(root, "ragbound"):
        parts.append(_command_section(path, command))
    return "\n".join(parts)


def _walk(command: Any, path: str) -> list[tuple[str, Any]]:
    """(path, command) for every leaf command under ``command``, depth first."""
    children = getattr(command, "commands", None)
    if not children:
        return [(path, command)]
    found: list[tuple[str, Any]] = []
    for name, child in children.items():
        found.extend(_walk(child, f"{path} {name}"))
    return found


def _command_section(path: str, command: Any) -> str:
    lines = [f"## `{path}`", "", f"```\n{path} {_usage(command)}\n```", ""]
    if command.help:
        lines += [inspect.cleandoc(command.help), ""]
    rows = [_param_row(param) for param in command.params if not _hidden(param)]
    if rows:
        lines += ["| argument / option | meaning | default |", "|---|---|---|", *rows, ""]
    return "\n".join(lines)


def _usage(command: Any) -> str:
    pieces = []
    for param in command.params:
        if _hidden(param):
            continue
        if param.param_type_name == "argument":
            name = param.name.upper() + ("..." if param.nargs == -1 else "")
            pieces.append(name if param.required else f"[{name}]")
        elif param.required:
            pieces.append(f"{param.opts[0]} {_metavar(param)}")
    return " ".join([*pieces, "[OPTIONS]"])


def _param_row(param: Any) -> str:
    if param.param_type_name == "argument":
        name = param.name.upper() + ("..." if param.nargs == -1 else "")
    else:
        names = [*param.opts, *param.secondary_opts]
        name = " / ".join(names)
        if not param.is_flag:
            name += f" {_metavar(param)}"
    help_text = " ".join((getattr(param, "help", None) or "").split()).replace("|", "\\|")
    return f"| `{name}` | {help_text} | {_default(param)} |"


def _metavar(param: Any) -> str:
    """INT, NUMBER, PATH or TEXT, from the option's type annotation."""
    from pathlib import Path

    annotation = param.type_descriptor.annotation
    members = typing.get_args(annotation) or (annotation,)
    for member in members:
        inner = typing.get_args(member) or (member,)  # list[Path] -> Path
        for kind, label in ((bool, "TEXT"), (int, "INT"), (float, "NUMBER"), (Path, "PATH")):
            if any(isinstance(t, type) and issubclass(t, kind) for t in inner):
                return label
    return "TEXT"


def _default(param: Any) -> str:
    if param.required:
        return "required"
    value = param.default
    if value is None or value == () or value == []:
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`"


def _hidden(param: Any) -> bool:
    return bool(getattr(param, "hidden", False)) or param.name == "help"


if __name__ == "__main__":
    sys.stdout.write(render())
