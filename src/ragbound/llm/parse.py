"""Robust parsing of model output: JSON objects with defect repair, and restricted tag values.

Nothing is guessed: output that cannot be read unambiguously raises ParseError with the raw
text, and :func:`complete_parsed` retries the call before giving up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ragbound.llm.base import LLM, GenerationParams, LLMResponse, ParseError, default_params
from ragbound.llm.cache import acall, call
from ragbound.llm.prompts import Prompt

T = TypeVar("T")
_LITERALS = {"true": "true", "false": "false", "null": "null"}
_LITERALS |= {"True": "true", "False": "false", "None": "null"}
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RETRY_TEMPERATURE = 0.7


class _Unrepairable(ValueError):
    """The candidate text has a defect that cannot be repaired without guessing."""


def _string_end(text: str, start: int) -> int:
    """Index just past the string literal opening at ``start`` (either quote style)."""
    quote, index = text[start], start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == quote:
            return index + 1
        index += 1
    raise _Unrepairable("unterminated string")


def _object_end(text: str, start: int) -> int | None:
    """Index just past the ``}`` matching the ``{`` at ``start``; None if it never closes."""
    depth, index = 0, start
    while index < len(text):
        char = text[index]
        if char in "\"'":
            try:
                index = _string_end(text, index)
            except _Unrepairable:
                return None
            continue
        depth += (char in "{[") - (char in "}]")
        index += 1
        if depth == 0:
            return index
    return None


def _decode_string(literal: str) -> str:
    """The value of a double- or single-quoted string literal."""
    body = re.sub(r"(?<!\\)((?:\\\\)*)\\'", r"\1'", literal[1:-1])  # \' is no JSON escape
    if literal[0] == "'":
        body = re.sub(r'(?<!\\)((?:\\\\)*)"', r'\1\\"', body)
    try:
        return str(json.loads(f'"{body}"', strict=False))
    except json.JSONDecodeError as exc:
        raise _Unrepairable(f"bad string {literal[:40]!r}") from exc


def _next_char(text: str, index: int) -> str:
    """The next non-space character at or after ``index`` ('' at the end)."""
    rest = text[index:].lstrip()
    return rest[0] if rest else ""


def _repair_word(word: str, text: str, end: int) -> str:
    if word in _LITERALS:
        return _LITERALS[word]
    if _next_char(text, end) == ":":
        return json.dumps(word)  # an unquoted key
    raise _Unrepairable(f"bare word {word!r} is not a value")


def _repair_token(text: str, index: int) -> tuple[str, int]:
    """The repaired JSON for the token at ``index`` and the index after it."""
    char = text[index]
    if char in "\"'":
        end = _string_end(text, index)
        return json.dumps(_decode_string(text[index:end]), ensure_ascii=False), end
    if match := _NUMBER.match(text, index):
        return match.group(0), match.end()
    if match := _WORD.match(text, index):
        return _repair_word(match.group(0), text, match.end()), match.end()
    if char == "," and _next_char(text, index + 1) in ("}", "]"):
        return "", index + 1  # a trailing comma
    return char, index + 1


def repair_json(text: str) -> str:
    """Rewrite JSON-like text as JSON: quotes, Python literals, unquoted keys, trailing commas."""
    out, index = [], 0
    while index < len(text):
        token, index = _repair_token(text, index)
        out.append(token)
    return "".join(out)


def _load_object(candidate: str) -> dict[str, Any] | None:
    """The object in ``candidate`` as is, or after repair; None if neither works."""
    for attempt in (lambda: candidate, lambda: repair_json(candidate)):
        try:
            value = json.loads(attempt(), strict=False)
        except (json.JSONDecodeError, _Unrepairable):
            continue
        if isinstance(value, dict):
            return value
    return None


def _outermost_objects(text: str) -> list[dict[str, Any]]:
    """The objects of the outermost balanced ``{...}`` spans that parse (maybe after repair)."""
    found, covered = [], 0
    for match in re.finditer(r"\{", text):
        if match.start() < covered:
            continue  # inside a balanced span already tried: a part is never taken for the whole
        end = _object_end(text, match.start())
        if end is None:
            continue
        covered = end
        if (obj := _load_object(text[match.start() : end])) is not None:
            found.append(obj)
    return found


def parse_json_object(text: str) -> dict[str, Any]:
    """The JSON object in a model reply, which may be fenced or surrounded by prose.

    Common defects are repaired: trailing commas, single quotes, Python ``True``/``False``/
    ``None`` and unquoted keys. When the reply holds several objects, the last outermost one
    wins (models restate the format before answering). No object at all raises ParseError.
    """
    found = _outermost_objects(text)
    if not found:
        raise ParseError("no JSON object could be read from the model output", raw=text)
    return found[-1]


def extract_tag(text: str, tag: str, allowed: Collection[str]) -> str:
    """The stripped content of the last ``<tag>…</tag>``, as its canonical spelling in ``allowed``.

    Tag names and values compare case-insensitively. Small models often drop the tags and
    reply with the bare value: a reply that is nothing but an allowed value (optionally after
    ``tag:``, with closing punctuation) is accepted too, since it is unambiguous. Anything else
    without the tag, or a value not in ``allowed``, raises ParseError.
    """
    canonical = {option.casefold(): option for option in allowed}
    name = re.escape(tag)
    pattern = re.compile(rf"<\s*{name}\s*>(.*?)<\s*/\s*{name}\s*>", re.IGNORECASE | re.DOTALL)
    values = pattern.findall(text)
    if not values:
        bare = re.sub(rf"^\s*{name}\s*:\s*", "", text, flags=re.IGNORECASE).strip().rstrip(".!")
        if bare.casefold() in canonical:
            return canonical[bare.casefold()]
        raise ParseError(f"no <{tag}>…</{tag}> in the model output", raw=text)
    value = values[-1].strip()
    if value.casefold() not in canonical:
        raise ParseError(f"<{tag}> holds {value!r}, expected one of {sorted(allowed)}", raw=text)
    return canonical[value.casefold()]


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """A parsed reply: ``value``, the ``response`` it came from and ``attempts`` made (≥ 1)."""

    value: T
    response: LLMResponse
    attempts: int


def _attempt_params(params: GenerationParams, attempt: int) -> GenerationParams:
    """Parameters of retry ``attempt``: seed + attempt, temperature raised if greedy."""
    if attempt == 0:
        return params
    temperature = max(params.temperature, RETRY_TEMPERATURE)
    return params.model_copy(
        update={"seed": (params.seed or 0) + attempt, "temperature": temperature}
    )


def _give_up(prompt: Prompt, llm: LLM, attempts: int, last: ParseError) -> ParseError:
    return ParseError(
        f"prompt {prompt.id!r} v{prompt.version}: the reply of {llm.model_id} could not be "
        f"parsed after {attempts} attempts ({last.message})",
        raw=last.raw,
    )


def complete_parsed(
    llm: LLM,
    prompt: Prompt,
    variables: Mapping[str, object],
    parser: Callable[[str], T],
    *,
    params: GenerationParams | None = None,
    retries: int = 2,
) -> Parsed[T]:
    """Render ``prompt``, call ``llm`` and parse the reply; retry on ParseError.

    Retry ``n`` uses seed + n, and a temperature of at least ``RETRY_TEMPERATURE`` (greedy
    decoding would repeat the same reply). After ``retries`` retries, raise ParseError carrying
    the last raw output.
    """
    messages = prompt.render(**variables)
    base = default_params(params)
    last: ParseError | None = None
    for attempt in range(retries + 1):
        response = call(
            llm,
            messages,
            _attempt_params(base, attempt),
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        try:
            return Parsed(parser(response.text), response, attempt + 1)
        except ParseError as exc:
            last = exc
    assert last is not None
    raise _give_up(prompt, llm, retries + 1, last)


async def acomplete_parsed(
    llm: LLM,
    prompt: Prompt,
    variables: Mapping[str, object],
    parser: Callable[[str], T],
    *,
    params: GenerationParams | None = None,
    retries: int = 2,
) -> Parsed[T]:
    """Async :func:`complete_parsed`."""
    messages = prompt.render(**variables)
    base = default_params(params)
    last: ParseError | None = None
    for attempt in range(retries + 1):
        response = await acall(
            llm,
            messages,
            _attempt_params(base, attempt),
            prompt_id=prompt.id,
            prompt_version=prompt.version,
        )
        try:
            return Parsed(parser(response.text), response, attempt + 1)
        except ParseError as exc:
            last = exc
    assert last is not None
    raise _give_up(prompt, llm, retries + 1, last)
