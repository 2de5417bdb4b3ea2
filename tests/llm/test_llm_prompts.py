"""Prompt files: built-ins, overrides, placeholder checks at load and variable checks at render."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ragbound.llm import (
    PromptError,
    builtin_examples,
    format_examples,
    list_prompts,
    load_prompt,
    load_prompt_file,
    parse_json_object,
)


def write_prompt(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


JUDGE_V2 = """
    ---
    id: relevance-judge
    version: 2
    description: my own judge
    variables: [query, context]
    ---
    # system
    Score {{"score": x}}.
    # user
    Q={query} C={context}
    """


@pytest.fixture(autouse=True)
def no_env_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGBOUND_PROMPTS", raising=False)


def test_builtin_relevance_judge_follows_table_11() -> None:
    prompt = load_prompt("relevance-judge")
    assert (prompt.id, prompt.version, prompt.variables) == (
        "relevance-judge",
        1,
        ("query", "context"),
    )
    system, question = prompt.render(query="Do bees sting?", context="Bees {sting} rarely.")
    assert (system.role, question.role) == ("system", "user")
    assert system.content.startswith(
        "Your task is to evaluate if the query is relevant to the retrieved context"
    )
    assert '{\n  "feedback": [FEEDBACK],\n  "score": [SCORE],\n}' in system.content
    assert "float number between 0 and 1" in system.content
    assert "Partial scores are allowed and encouraged." in system.content
    assert "Query:\nDo bees sting?\n\nContext:\nBees {sting} rarely." in question.content
    assert question.content.endswith("other than the json object.")


def test_builtin_synth_query_paper_follows_table_10_with_table_13_examples() -> None:
    prompt = load_prompt("synth-query-paper")
    assert (prompt.version, prompt.variables) == (1, ("examples", "context"))
    examples = builtin_examples("pubmed")
    assert len(examples) == 3 and {e["options"]["C"] for e in examples} == {"maybe"}
    assert len(builtin_examples("textbooks")) == 2
    system, question = prompt.render(examples=format_examples(examples), context="Honey is sweet.")
    assert "setting up quiz questions" in system.content
    assert "should be diverse in nature" in system.content
    assert "Does the administration of statins" in system.content
    assert parse_json_object(system.content.split("sample questions.")[1]) == examples[-1]
    assert "Honey is sweet." in question.content
    assert question.content.endswith("generate similar question following the json format.")


def test_builtin_synth_query_asks_for_self_contained_questions() -> None:
    prompt = load_prompt("synth-query")
    assert (prompt.version, prompt.variables) == (2, ("sample_questions", "context"))
    system, question = prompt.render(sample_questions="- Do bees sting?", context="Honey.")
    assert "- Do bees sting?" in system.content and 'no "the study"' in system.content
    assert "Honey." in question.content
    assert question.content.endswith('{"question": "...", "answer": "..."}')


def test_unknown_builtin_examples_are_an_error() -> None:
    with pytest.raises(PromptError, match="pubmed"):
        builtin_examples("nope")


def test_override_dir_wins_over_the_builtin(tmp_path: Path) -> None:
    write_prompt(tmp_path, "relevance-judge", JUDGE_V2)
    prompt = load_prompt("relevance-judge", override_dir=tmp_path)
    assert prompt.version == 2 and prompt.path == tmp_path / "relevance-judge.md"
    system, question = prompt.render(query="q", context="c")
    assert system.content == 'Score {"score": x}.' and question.content == "Q=q C=c"
    assert load_prompt("synth-query", override_dir=tmp_path).version == 2  # falls back


def test_env_dir_wins_over_the_builtin_and_loses_to_the_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_prompt(tmp_path / "env", "relevance-judge", JUDGE_V2)
    write_prompt(tmp_path / "arg", "relevance-judge", JUDGE_V2.replace("version: 2", "version: 3"))
    monkeypatch.setenv("RAGBOUND_PROMPTS", str(tmp_path / "env"))
    assert load_prompt("relevance-judge").version == 2
    assert load_prompt("relevance-judge", override_dir=tmp_path / "arg").version == 3


def test_list_prompts_includes_user_prompts(tmp_path: Path) -> None:
    write_prompt(tmp_path, "my-prompt", JUDGE_V2.replace("relevance-judge", "my-prompt"))
    listed = list_prompts(override_dir=tmp_path)
    assert listed == sorted(listed) and listed.count("relevance-judge") == 1
    assert {"my-prompt", "relevance-judge", "synth-query", "tripwire-generate"} <= set(listed)


def test_unknown_placeholder_fails_at_load_naming_file_and_allowed_names(tmp_path: Path) -> None:
    path = write_prompt(tmp_path, "relevance-judge", JUDGE_V2.replace("C={context}", "C={contxt}"))
    with pytest.raises(PromptError) as info:
        load_prompt("relevance-judge", override_dir=tmp_path)
    message = str(info.value)
    assert f"{path}:10:" in message and "{contxt}" in message
    assert "['query', 'context']" in message


def test_lone_brace_fails_at_load_with_its_line(tmp_path: Path) -> None:
    path = write_prompt(tmp_path, "x", JUDGE_V2.replace('{{"score": x}}', '{\n"score": x}'))
    with pytest.raises(PromptError, match=r"x\.md:8: a lone '\{'"):
        load_prompt_file(path)


def test_missing_and_unknown_variables_fail_at_render() -> None:
    prompt = load_prompt("relevance-judge")
    with pytest.raises(PromptError, match=r"missing variables \['context'\]"):
        prompt.render(query="q")
    with pytest.raises(PromptError, match=r"unknown variables \['contxt'\]"):
        prompt.render(query="q", context="c", contxt="c")


def test_sections_can_hold_few_shot_turns(tmp_path: Path) -> None:
    path = write_prompt(
        tmp_path,
        "shots",
        """
        ---
        id: shots
        version: 1
        variables: [q]
        ---
        # System
        Answer yes or no.

        # user
        Is water wet?
        # assistant
        yes
        # user
        {q}
        """,
    )
    messages = load_prompt_file(path).render(q="Is fire cold?")
    assert [(m.role, m.content) for m in messages] == [
        ("system", "Answer yes or no."),
        ("user", "Is water wet?"),
        ("assistant", "yes"),
        ("user", "Is fire cold?"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# user\nhi\n", "must start with a '---' header"),
        ("---\nid: x\nversion: 1\nvariables: []\n# user\nhi\n", "never closed"),
        ("---\nid: x\nvariables: []\n---\n# user\nhi\n", r"lacks \['version'\]"),
        ("---\nid: x\nversion: one\nvariables: []\n---\n# user\nhi\n", "whole number"),
        ("---\nid: x\nversion: 1\nvariables: [a b]\n---\n# user\nhi\n", "invalid variable"),
        ("---\nid: x\nversion: 1\nvariables: []\nauthor: me\n---\n# user\n", "key one of"),
        ("---\nid: x\nversion: 1\nvariables: []\n---\nhello\n# user\nhi\n", "before the first"),
        ("---\nid: x\nversion: 1\nvariables: []\n---\n\n", "no '# system'"),
    ],
)
def test_malformed_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.md"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(PromptError, match=message) as info:
        load_prompt_file(path)
    assert str(path) in str(info.value)


def test_unknown_bad_or_mismatched_ids(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=r"unknown prompt 'nope'.*relevance-judge"):
        load_prompt("nope")
    with pytest.raises(PromptError, match="invalid prompt id"):
        load_prompt("../secrets")
    write_prompt(tmp_path, "other", JUDGE_V2)
    with pytest.raises(PromptError, match="does not match the file name"):
        load_prompt("other", override_dir=tmp_path)
    with pytest.raises(PromptError, match="does not exist"):
        load_prompt("synth-query", override_dir=tmp_path / "missing")
