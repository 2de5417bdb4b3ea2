"""The config of a leave-one-out run (``ragbound bench run CONFIG``), read from TOML or YAML
(an example: docs/abstention-bench.md).

Relative paths (knowledge files, ``local:`` model files, ``prompt_dir``, ``cache``, ``out``)
resolve against the config file's folder. Every problem is an InputError naming the field.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ragbound.artifacts import sha256_text
from ragbound.bench.models import STRATEGIES, Mode, Strategy
from ragbound.embedders import NAMED_EMBEDDERS, is_endpoint, is_lexical
from ragbound.errors import InputError
from ragbound.llm import LLM, LLM_SPECS, GenerationParams, PromptError, load_prompt, make_llm

DEFAULT_SYSTEM_PROMPT = "bench-system-conservative"
HYDE_PROMPT = "bench-hyde"
RANDOM_QUESTIONS_PROMPT = "bench-random-questions"
SYSTEM_PROMPT_VARIABLES = ("question", "context")
LLM_KINDS = ("local", "openai")


def _resolve(value: Path, info: ValidationInfo) -> Path:
    """``value`` made absolute against the config's folder (else the working directory)."""
    path = Path(value).expanduser()
    base = Path((info.context or {}).get("base", Path.cwd()))
    return path if path.is_absolute() else (base / path).resolve()


class ModelSpec(BaseModel):
    """A target (or helper) LLM: ``local``, ``local:/path/model.gguf``, ``openai:MODEL``.

    ``name`` labels it in inputs and tables (default: the spec, with a local path shortened to
    its file name). ``base_url`` and ``api_key_env`` (the name of the environment variable that
    holds the key) are for ``openai``; ``options`` go to the backend as keyword arguments
    (for example ``n_ctx`` for ``local``, ``timeout`` for ``openai``). A plain string is a spec.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str
    name: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"spec": data} if isinstance(data, str) else data

    @field_validator("spec")
    @classmethod
    def _known_spec(cls, spec: str, info: ValidationInfo) -> str:
        kind, colon, rest = spec.partition(":")
        if kind not in LLM_KINDS:
            raise ValueError(f"unknown model spec {spec!r}: expected one of {', '.join(LLM_SPECS)}")
        if kind == "local" and colon:
            path = _resolve(Path(rest), info)
            if not path.is_file():
                raise ValueError(f"model file {path} does not exist")
            return f"local:{path}"
        return spec

    @model_validator(mode="after")
    def _openai_options_only(self) -> ModelSpec:
        if self.spec.startswith("local") and (self.base_url or self.api_key_env):
            raise ValueError("base_url and api_key_env are for openai models, not local ones")
        return self

    @property
    def label(self) -> str:
        """The name shown in inputs and tables."""
        if self.name:
            return self.name
        kind, _, rest = self.spec.partition(":")
        return f"local:{Path(rest).name}" if kind == "local" and rest else self.spec

    def make(self) -> LLM:
        """The backend this spec names (models load lazily, on the first call)."""
        kwargs = dict(self.options)
        if self.base_url:
            kwargs["base_url"] = self.base_url
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise InputError(
                    f"model {self.label!r} (field api_key_env): environment variable "
                    f"{self.api_key_env} is not set"
                )
            kwargs["api_key"] = key
        return make_llm(self.spec, **kwargs)


class BenchConfig(BaseModel):
    """Everything that defines a leave-one-out run (an example: docs/abstention-bench.md).

    ``knowledge``: QA-set or filtered-set JSON files, each its own knowledge base.
    ``models``: target LLMs. ``strategies``: context strategies. ``prompts``: system-prompt
    ids (prompt files declaring ``question`` and ``context``; ``prompt_dir`` is searched
    first). ``k``: retrieved facts for rag and hyde. ``embedder``: dense embedder spec.
    ``hyde_model``: writes HyDE's hypothetical answers (default: each target model itself).
    ``mode``: ``leave_one_out``, or ``random_synthetic`` where ``generator_model`` (default:
    the first target model) writes ``n_questions`` new questions per set from clusters of
    ``questions_per_cluster``. ``limit``: ask only a seeded sample of N questions per set
    (a larger N keeps the smaller sample's questions; the knowledge stays whole).
    ``concurrency``: calls in flight per model (capped by the backend). ``params``: target
    calls; ``generator_params``: HyDE and question writing. ``cache``: the response cache
    folder (true: the default one, false: none). ``out``: the run directory.
    """

    model_config = ConfigDict(extra="forbid")

    knowledge: list[Path] = Field(min_length=1)
    models: list[ModelSpec] = Field(min_length=1)
    strategies: list[Strategy] = Field(default_factory=lambda: list(STRATEGIES), min_length=1)
    prompt_dir: Path | None = None
    prompts: list[str] = Field(default_factory=lambda: [DEFAULT_SYSTEM_PROMPT], min_length=1)
    k: int = Field(default=5, ge=1)
    embedder: str = "minilm"
    hyde_model: ModelSpec | None = None
    mode: Mode = "leave_one_out"
    generator_model: ModelSpec | None = None
    n_questions: int = Field(default=50, ge=1)
    questions_per_cluster: int = Field(default=5, ge=1)
    limit: int | None = Field(default=None, ge=1)
    seed: int = 0
    concurrency: int = Field(default=4, ge=1)
    params: GenerationParams = Field(default_factory=lambda: GenerationParams(max_tokens=256))
    generator_params: GenerationParams = Field(
        default_factory=lambda: GenerationParams(max_tokens=512)
    )
    cache: Path | bool = True
    out: Path = Field(default=Path("run"), validate_default=True)

    @field_validator("knowledge")
    @classmethod
    def _knowledge_files(cls, paths: list[Path], info: ValidationInfo) -> list[Path]:
        resolved = [_resolve(path, info) for path in paths]
        for index, path in enumerate(resolved):
            if not path.is_file():
                raise ValueError(f"knowledge[{index}]: no such file {path}")
            if path in resolved[:index]:
                raise ValueError(f"knowledge[{index}]: {path} is listed twice")
        return resolved

    @field_validator("prompt_dir", "out")
    @classmethod
    def _path(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        return None if path is None else _resolve(path, info)

    @field_validator("cache")
    @classmethod
    def _cache(cls, value: Path | bool, info: ValidationInfo) -> Path | bool:
        return value if isinstance(value, bool) else _resolve(value, info)

    @field_validator("embedder")
    @classmethod
    def _dense_embedder(cls, spec: str, info: ValidationInfo) -> str:
        if is_lexical(spec):
            raise ValueError("rag and hyde compare embeddings: use a dense embedder, not bm25")
        if spec in NAMED_EMBEDDERS or is_endpoint(spec):
            return spec
        path = _resolve(Path(spec), info)
        if not path.is_dir():
            raise ValueError(
                f"unknown embedder {spec!r}: expected minilm, mpnet, openai:MODEL or a local "
                "model folder"
            )
        return str(path)

    @model_validator(mode="after")
    def _prompts_load(self) -> BenchConfig:
        for index, prompt_id in enumerate(self.prompts):
            self._check_prompt(f"prompts[{index}]", prompt_id, SYSTEM_PROMPT_VARIABLES)
        if "hyde" in self.strategies:
            self._check_prompt("strategies (hyde)", HYDE_PROMPT, ("question",))
        if self.mode == "random_synthetic":
            self._check_prompt(
                "mode (random_synthetic)", RANDOM_QUESTIONS_PROMPT, ("questions", "n")
            )
        return self

    def _check_prompt(self, field: str, prompt_id: str, variables: tuple[str, ...]) -> None:
        try:
            prompt = load_prompt(prompt_id, override_dir=self.prompt_dir)
        except PromptError as exc:
            raise ValueError(f"{field}: {exc}") from None
        if set(prompt.variables) != set(variables):
            raise ValueError(
                f"{field}: prompt {prompt_id!r} ({prompt.path}) declares variables "
                f"{list(prompt.variables)}, expected {list(variables)}"
            )

    @model_validator(mode="after")
    def _unique_names(self) -> BenchConfig:
        labels = [model.label for model in self.models]
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        if repeated:
            raise ValueError(f"models: {repeated} listed twice (give each a distinct name)")
        for field in ("strategies", "prompts"):
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field}: a value is listed twice: {values}")
        return self

    def config_hash(self) -> str:
        """SHA-256 of the resolved config (canonical JSON)."""
        data = self.model_dump(mode="json")
        return sha256_text(json.dumps(data, sort_keys=True, ensure_ascii=False))


def read_config_file(path: Path) -> dict[str, Any]:
    """The raw mapping in a ``.toml``, ``.yaml`` or ``.yml`` file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such config file")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise InputError(f"{path}: a run config is a .toml, .yaml or .yml file")
    text = path.read_text(encoding="utf-8")
    try:
        raw = tomllib.loads(text) if suffix == ".toml" else _load_yaml(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not valid {suffix[1:].upper()}: {exc}") from None
    except RecursionError:  # both parsers recurse: lists nested ~1,000 deep overflow them
        raise InputError(f"{path}: lists or tables nested too deep to read") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: the config must be a mapping of settings")
    return raw


def _load_yaml(text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None


def load_config(path: Path, **overrides: Any) -> BenchConfig:
    """Read and validate a run config. ``overrides`` replace settings (e.g. ``limit=10``).

    ``out`` defaults to ``<config name>-run`` beside the config file.
    """
    path = Path(path)
    raw = read_config_file(path)
    raw.setdefault("out", f"{path.stem}-run")
    raw.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return BenchConfig.model_validate(raw, context={"base": path.resolve().parent})
    except ValidationError as exc:
        raise InputError(f"{path}: {describe_errors(exc)}") from None


def describe_errors(exc: ValidationError) -> str:
    """Pydantic's errors as ``field: message`` clauses (``models[0].spec: unknown ...``)."""
    clauses = []
    for error in exc.errors():
        loc = (f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"])
        field = "".join(loc).lstrip(".")
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown setting"
        elif error["type"] == "literal_error":
            expected = message.removeprefix("Input should be ")
            message = f"unknown value {error['input']!r}: expected {expected}"
        named = not field or message.startswith(field)  # the validator already named it
        clauses.append(message if named else f"{field}: {message}")
    return "; ".join(clauses)
