"""The http(s) URLs of the models (a provider's endpoint, its metrics): the field type, its
check, and the CEL rules that make the API server check the same."""

from __future__ import annotations

import re
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field

from grid.models.fields import (
    HOST_PATTERN,
    NO_WHITESPACE,
    PORT_PATTERN,
    cel_bracketed_ipv6,
    split_host_port,
)
from grid.models.validation_rules import ValidationRule, cel_string, validations

ENDPOINT_PATTERN = r"^https?://[^/?#@\s]+(/[^?#\s]*)?$"

# The host and port of a URL the pattern accepts (between its `//` and the next `/`): a
# port may have leading zeros, and the default port is left out.
_NETLOC_PATTERN = rf"^{HOST_PATTERN}(:0*{PORT_PATTERN})?$"
_NETLOC = "self.split('/')[2]"
_HOST_HELP = (
    "host must be a DNS name, an IPv4 address or an IPv6 address in brackets, and a port "
    "must be a number from 1 to 65535"
)
URL_HOST_AND_PORT = ValidationRule(
    f"size(self.split('/')) < 3 || ({_NETLOC}.matches({cel_string(_NETLOC_PATTERN)}) && "
    f"({_NETLOC}.startsWith('[') || size({_NETLOC}.split(':')[0]) <= 253))",
    _HOST_HELP,
)
URL_IPV6_HOST = ValidationRule(
    f"size(self.split('/')) < 3 || {cel_bracketed_ipv6(_NETLOC)}", _HOST_HELP
)


def check_http_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host and no credentials, query or fragment."""
    if not re.fullmatch(ENDPOINT_PATTERN, url):
        raise ValueError(
            "must be an http:// or https:// URL with a host and an optional path, without "
            "user:password@, query string or fragment (credentials belong in auth.secretRef)"
        )
    try:
        parts = urlsplit(url)
        default_port = 443 if parts.scheme == "https" else 80
        netloc = (
            parts.netloc
            if re.search(r":[0-9]+$", parts.netloc)
            else (f"{parts.netloc}:{default_port}")
        )
        split_host_port(netloc)
    except ValueError:
        raise ValueError(_HOST_HELP) from None
    return url


HttpUrl = Annotated[
    str,
    AfterValidator(check_http_url),
    Field(
        json_schema_extra={
            "pattern": ENDPOINT_PATTERN,
            "maxLength": 2048,
            **validations(NO_WHITESPACE, URL_HOST_AND_PORT, URL_IPV6_HOST),
        }
    ),
]
"""An http:// or https:// URL with a host, an optional port and path."""
