"""``spec.auth.custom`` of an InferenceProvider: a Custom provider whose header value the
site that owns it renders from a template in its Secret. Only names live here: the
template, the header name (when the Secret holds it) and the values the template names stay
in the Secret."""

from __future__ import annotations

from pydantic import Field

from grid.models.common import GridModel
from grid.models.fields import SecretKey

DEFAULT_HEADER_KEY = "header"
"""The Secret entry read as the header name when neither ``auth.header`` nor
``custom.headerKey`` names one."""


class CustomSettings(GridModel):
    """How a Custom provider's value is rendered: the entry ``secretRef.key`` names is a
    template whose ``{{entry}}`` placeholders name other entries of the same Secret."""

    header_key: SecretKey | None = Field(
        None,
        description="The entry of the Secret holding the request header's name, when "
        "auth.header does not name it (not both); default 'header'. The name follows the "
        "rules of auth.header.",
    )

    def header_entry(self, header: str | None) -> str | None:
        """The Secret entry holding the header's name, or None when ``header`` (the
        provider's ``auth.header``) names it."""
        if header is not None:
            return None
        return self.header_key or DEFAULT_HEADER_KEY
