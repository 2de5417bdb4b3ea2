"""DetectorConfig: the online test's parameters, their defaults and their validation, once.

Every other place that needs k, tau, the statistic, alpha or the p-value method (the
detector, the Guard, the calibration manifest) reads them from here; their defaults and
descriptions are plain constants in ``detect.names``, which the CLI's option defaults and
help read without loading pydantic.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ragbound.detect.names import AUTO as AUTO  # re-exported, as are the names used here
from ragbound.detect.names import (
    COMBINED,
    DEFAULT_ALPHA,
    DEFAULT_K,
    DEFAULT_P_VALUE_METHOD,
    DEFAULT_STATISTIC,
    DEFAULT_TAU,
    DESCRIPTIONS,
    TAU_AUTO,
)
from ragbound.errors import InputError
from ragbound.stats.names import STATISTICS, PValueMethod

Alpha = Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False, description=DESCRIPTIONS["alpha"])]

PositiveInt = Annotated[int, Field(strict=True, ge=1)]
NonNegativeInt = Annotated[int, Field(strict=True, ge=0)]


class DetectorConfig(BaseModel):
    """The parameters of the online out-of-knowledge test (paper section 3), validated.

    Frozen: :meth:`updated` gives a validated copy with some fields changed. The field
    descriptions double as the CLI's ``--help`` text.

    >>> DetectorConfig().k, DetectorConfig().tau, DetectorConfig().statistic
    (32, 1.0, 'mss')
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    statistic: str = Field(DEFAULT_STATISTIC, description=DESCRIPTIONS["statistic"])
    k: int = Field(DEFAULT_K, ge=1, description=DESCRIPTIONS["k"])
    tau: float = Field(DEFAULT_TAU, gt=0, allow_inf_nan=False, description=DESCRIPTIONS["tau"])
    alpha: Alpha = DEFAULT_ALPHA
    p_value_method: PValueMethod = Field(
        DEFAULT_P_VALUE_METHOD, description=DESCRIPTIONS["p_value_method"]
    )
    reranker: str | None = Field(None, description=DESCRIPTIONS["reranker"])

    @field_validator("statistic")
    @classmethod
    def _known_statistic(cls, value: str) -> str:
        if value not in (*STATISTICS, COMBINED):
            raise ValueError(
                f"unknown statistic {value!r}: choose one of {', '.join(STATISTICS)}, {COMBINED}"
            )
        return value

    @field_validator("reranker", mode="before")
    @classmethod
    def _named_reranker(cls, value: Any) -> Any:
        if isinstance(value, os.PathLike):
            value = os.fspath(value)  # a Path is stored as its text
        if isinstance(value, str) and not value.strip():
            raise ValueError("reranker must be a model folder, not an empty string")
        return value

    @field_validator("k", mode="before")
    @classmethod
    def _integer_k(cls, value: Any) -> Any:
        # pydantic would read True as 1 and 3.0 as 3; neither is a neighbour count
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(f"k must be a whole number of neighbours, got {value!r}")
        return value

    def updated(self, **changes: Any) -> DetectorConfig:
        """A validated copy with the given fields changed; None means "keep" (InputError if bad).

        >>> DetectorConfig().updated(k=8, alpha=None).k
        8
        """
        kept = {name: value for name, value in changes.items() if value is not None}
        return detector_config(**{**self.model_dump(), **kept})


DEFAULTS = DetectorConfig()

# Softmax temperature over cosine similarities each embedder was trained with: the
# sentence-transformers train script of these models multiplies cosine similarities by
# scale = 20 before a cross-entropy over in-batch negatives, i.e. temperature 1 / 20.
TRAINING_TEMPERATURES: dict[str, float] = {"all-MiniLM-L6-v2": 0.05, "all-mpnet-base-v2": 0.05}


def resolve_tau(tau: float | str, embedder_name: str) -> float | str:
    """Replace ``tau="auto"`` by the embedder's training temperature.

    Embedders without a known temperature (BM25, a local model) get the paper's 1.0.
    Any other value is returned unchanged, to be validated with the rest of the config.

    >>> resolve_tau("auto", "all-MiniLM-L6-v2"), resolve_tau("auto", "bm25"), resolve_tau(0.2, "x")
    (0.05, 1.0, 0.2)
    """
    if tau != TAU_AUTO:
        return tau
    return TRAINING_TEMPERATURES.get(embedder_name, DEFAULTS.tau)


DETECTOR_PARAMS: tuple[str, ...] = tuple(DetectorConfig.model_fields)
# What the array-level BoundaryDetector takes: the reranker decides how its rows are made,
# which is the Guard's business, not the test's.
TEST_PARAMS: tuple[str, ...] = tuple(name for name in DETECTOR_PARAMS if name != "reranker")


def detector_config(**params: Any) -> DetectorConfig:
    """Build a DetectorConfig; a bad value is an InputError naming the parameter.

    >>> detector_config(k=0)
    Traceback (most recent call last):
    ...
    ragbound.errors.InputError: k: Input should be greater than or equal to 1 (got 0)
    """
    try:
        return DetectorConfig(**params)
    except ValidationError as exc:
        raise InputError(_describe(exc)) from exc


T = TypeVar("T")


def check_option(kind: Any, value: T, name: str) -> T:
    """Validate ``value`` against an annotated type such as :data:`Alpha` (InputError if not)."""
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as exc:
        raise InputError(_describe(exc, name)) from exc


def _describe(exc: ValidationError, name: str | None = None) -> str:
    """One line per bad field: ``field: problem (got value)``."""
    parts = []
    for error in exc.errors():
        field = name or ".".join(str(part) for part in error["loc"]) or "value"
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{field}: {message} (got {error['input']!r})")
    return "; ".join(parts)
