"""What an InferenceProvider offers: the models it serves and what they cost."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from grid.models.common import GridModel
from grid.models.fields import LIST_SET, NO_WHITESPACE, Price, unique_values
from grid.models.validation_rules import ValidationRule, validations

MODEL_NAME_PATTERN = r"^[^\s]+$"
CAPABILITY_PATTERN = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
_MAX_OVERLAY_NAME_BYTES = 256

MODEL_NAME_BYTES = ValidationRule(
    # maxLength counts characters; the overlay limits the bytes of a name.
    f"size(bytes(self)) <= {_MAX_OVERLAY_NAME_BYTES}",
    f"must be at most {_MAX_OVERLAY_NAME_BYTES} bytes in UTF-8",
)


def _check_model_name(name: str) -> str:
    if len(name.encode()) > _MAX_OVERLAY_NAME_BYTES:
        raise ValueError(MODEL_NAME_BYTES.message)
    return name


Capability = Annotated[str, Field(pattern=CAPABILITY_PATTERN, min_length=1, max_length=63)]


class ModelOffer(GridModel):
    """One model a provider serves."""

    name: Annotated[
        str,
        AfterValidator(_check_model_name),
        Field(json_schema_extra=validations(NO_WHITESPACE, MODEL_NAME_BYTES)),
    ] = Field(
        pattern=MODEL_NAME_PATTERN,
        min_length=1,
        max_length=256,
        description="Model name requests ask for (the gateway matches it exactly).",
    )
    capabilities: Annotated[list[Capability], AfterValidator(unique_values), LIST_SET] = Field(
        default_factory=list, max_length=64, description="e.g. chat, completion, embeddings."
    )
    context_window: int | None = Field(
        None, ge=1, le=100_000_000, description="Maximum tokens per request (prompt + output)."
    )


class Cost(GridModel):
    """Price per million tokens, as a whole number or a quoted decimal ("0.25")."""

    input_per_million: Price
    output_per_million: Price
