"""Run configs: TOML and YAML, defaults, paths relative to the config, errors naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragbound.bench.config import BenchConfig, ModelSpec, load_config
from ragbound.errors import InputError

SET = {
    "format": "ragbound.bench.qa/1",
    "name": "harbour",
    "pairs": [
        {
            "id": "qa-1",
            "question": "Which lighthouse guards the harbour mouth?",
            "answer": "The Gull Rock light.",
            "origin": "imported",
            "provenance": {"created_at": "2025-01-01T00:00:00+00:00"},
        }
    ],
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "harbour.json").write_text(json.dumps(SET), encoding="utf-8")
    return tmp_path


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_toml_defaults_and_paths_relative_to_the_config(folder: Path) -> None:
    path = write(folder, "bench.toml", 'knowledge = ["sets/harbour.json"]\nmodels = ["local"]\n')
    config = load_config(path)
    assert config.knowledge == [(folder / "sets" / "harbour.json").resolve()]
    assert config.out == (folder / "bench-run").resolve()
    assert config.prompts == ["bench-system-conservative"]
    assert config.strategies == ["direct", "long_context", "rag", "hyde"]
    assert (config.k, config.embedder, config.mode, config.limit) == (
        5,
        "minilm",
        "leave_one_out",
        None,
    )
    assert (config.params.temperature, config.params.seed) == (0.0, 0)
    assert config.models[0].label == "local"


def test_yaml_gives_the_same_settings_as_toml(folder: Path) -> None:
    (folder / "model.gguf").write_bytes(b"GGUF")
    toml = write(
        folder,
        "a.toml",
        'knowledge = ["sets/harbour.json"]\nstrategies = ["rag", "hyde"]\nk = 3\nout = "runs/a"\n'
        'prompts = ["bench-system-basic", "bench-system-opinion"]\n'
        '[[models]]\nspec = "local:model.gguf"\noptions = {n_ctx = 8192}\n'
        '[[models]]\nspec = "openai:gpt-4o-mini"\nbase_url = "http://127.0.0.1:8080/v1"\n'
        "[params]\nmax_tokens = 64\n",
    )
    yaml = write(
        folder,
        "a.yaml",
        "knowledge: [sets/harbour.json]\nstrategies: [rag, hyde]\nk: 3\nout: runs/a\n"
        "prompts: [bench-system-basic, bench-system-opinion]\n"
        "models:\n  - spec: local:model.gguf\n    options: {n_ctx: 8192}\n"
        "  - spec: openai:gpt-4o-mini\n    base_url: http://127.0.0.1:8080/v1\n"
        "params: {max_tokens: 64}\n",
    )
    from_toml, from_yaml = load_config(toml), load_config(yaml)
    assert from_toml == from_yaml
    assert from_toml.models[0].spec == f"local:{(folder / 'model.gguf').resolve()}"
    assert [m.label for m in from_toml.models] == ["local:model.gguf", "openai:gpt-4o-mini"]
    assert from_toml.out == (folder / "runs" / "a").resolve()
    assert from_toml.params.max_tokens == 64


def test_overrides_replace_settings(folder: Path) -> None:
    path = write(folder, "b.toml", 'knowledge = ["sets/harbour.json"]\nmodels = ["local"]\n')
    assert load_config(path, limit=7, out=None).limit == 7


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ('strategies = ["rag", "ragg"]', "strategies[1]: unknown value 'ragg': expected 'direct'"),
        ('prompts = ["bench-system-nope"]', "prompts[0]: unknown prompt 'bench-system-nope'"),
        ('prompts = ["moderation-judge"]', "prompts[0]: prompt 'moderation-judge'"),
        ("stratgies = []", "stratgies: unknown setting"),
        ('embedder = "bm25"', "embedder: rag and hyde compare embeddings"),
        ('embedder = "no-such-model"', "embedder: unknown embedder 'no-such-model'"),
        ("k = 0", "k: Input should be greater than or equal to 1"),
        ('mode = "random"', "mode: unknown value 'random': expected 'leave_one_out' or"),
        ('strategies = ["rag", "rag"]', "strategies: a value is listed twice"),
    ],
)
def test_bad_settings_name_their_field(folder: Path, settings: str, expected: str) -> None:
    path = write(
        folder, "bad.toml", f'knowledge = ["sets/harbour.json"]\nmodels = ["local"]\n{settings}\n'
    )
    with pytest.raises(InputError) as caught:
        load_config(path)
    assert str(path) in str(caught.value)
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        ('["gpt-4o"]', "models[0].spec: unknown model spec 'gpt-4o'"),
        ('["local", "anthropic:claude"]', "models[1].spec: unknown model spec 'anthropic:claude'"),
        ('["local:missing.gguf"]', "models[0].spec: model file"),
        ('["local", "local"]', "models: ['local'] listed twice"),
        ('[{spec = "local", base_url = "http://x"}]', "base_url and api_key_env are for openai"),
        ("[]", "models: List should have at least 1 item"),
    ],
)
def test_bad_models_name_their_field(folder: Path, models: str, expected: str) -> None:
    path = write(folder, "m.toml", f'knowledge = ["sets/harbour.json"]\nmodels = {models}\n')
    with pytest.raises(InputError, match=r"m\.toml") as caught:
        load_config(path)
    assert expected in str(caught.value)


def test_a_missing_knowledge_file_is_named(folder: Path) -> None:
    path = write(
        folder,
        "k.toml",
        'knowledge = ["sets/harbour.json", "sets/gone.json"]\nmodels = ["local"]\n',
    )
    with pytest.raises(InputError, match=r"knowledge\[1\]: no such file .*gone\.json"):
        load_config(path)


def test_unreadable_files_are_input_errors(folder: Path) -> None:
    with pytest.raises(InputError, match="no such config file"):
        load_config(folder / "absent.toml")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(write(folder, "broken.toml", "knowledge = [\n"))
    with pytest.raises(InputError, match="not valid YAML"):
        load_config(write(folder, "broken.yaml", "knowledge: [a\nmodels: ]"))
    with pytest.raises(InputError, match="must be a mapping"):
        load_config(write(folder, "list.yaml", "- local\n"))
    with pytest.raises(InputError, match=r"\.toml, \.yaml or \.yml"):
        load_config(write(folder, "conf.json", "{}"))


def test_prompt_dir_adds_system_prompts_and_checks_their_variables(folder: Path) -> None:
    prompts = folder / "prompts"
    prompts.mkdir()
    header = "---\nid: {id}\nversion: 2\ndescription: test\nvariables: [{variables}]\n---\n"
    (prompts / "my-system.md").write_text(
        header.format(id="my-system", variables="question, context")
        + "# system\nAnswer from the facts only.\n# user\n{context}\n\n{question}\n"
    )
    (prompts / "no-context.md").write_text(
        header.format(id="no-context", variables="question") + "# system\nHi.\n# user\n{question}\n"
    )
    base = 'knowledge = ["sets/harbour.json"]\nmodels = ["local"]\nprompt_dir = "prompts"\n'
    good = write(folder, "p.toml", base + 'prompts = ["my-system", "bench-system-basic"]\n')
    assert load_config(good).prompts == ["my-system", "bench-system-basic"]
    bad = write(folder, "q.toml", base + 'prompts = ["no-context"]\n')
    with pytest.raises(InputError, match=r"prompts\[0\].*declares variables \['question'\]"):
        load_config(bad)


def test_api_key_env_must_be_set_when_the_model_is_made(monkeypatch) -> None:
    monkeypatch.delenv("BENCH_TEST_KEY", raising=False)
    spec = ModelSpec(
        spec="openai:m", base_url="http://127.0.0.1:9/v1", api_key_env="BENCH_TEST_KEY"
    )
    with pytest.raises(InputError, match="BENCH_TEST_KEY is not set"):
        spec.make()
    monkeypatch.setenv("BENCH_TEST_KEY", "k")
    assert spec.make().model_id.endswith("m")


def test_the_config_hash_follows_the_settings(folder: Path) -> None:
    knowledge = [folder / "sets" / "harbour.json"]
    one = BenchConfig(knowledge=knowledge, models=["local"])  # type: ignore[list-item]
    two = BenchConfig(knowledge=knowledge, models=["local"], k=4)  # type: ignore[list-item]
    assert one.config_hash() == BenchConfig.model_validate(one.model_dump()).config_hash()
    assert one.config_hash() != two.config_hash()
