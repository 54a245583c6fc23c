"""Field types: durations, addresses, fingerprints, prices, names and list uniqueness."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from typing import Annotated

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from grid.models.fields import (
    DNS_SUBDOMAIN_PATTERN,
    DURATION_PATTERN,
    FINGERPRINT_PATTERN,
    HOST_PORT_PATTERN,
    DnsLabel,
    DnsSubdomain,
    Duration,
    HostPort,
    Price,
    format_seconds,
    normalize_fingerprint,
    parse_duration,
    split_host_port,
    within,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5s", 5.0),
        ("500ms", 0.5),
        ("1m", 60.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("0s", 0.0),
        ("24h", 86400.0),
    ],
)
def test_durations_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)
    assert Duration.parse(text).seconds == pytest.approx(seconds)
    assert str(Duration.parse(text)) == text


@pytest.mark.parametrize(
    "text", ["", "5", "5 s", "s", "-5s", "5d", "5sec", "1.s", ".5s", "5S", "5s "]
)
def test_bad_durations_are_rejected_with_the_accepted_form(text: str) -> None:
    with pytest.raises(ValueError, match=r"unit ms, s, m or h \(e\.g\. 500ms"):
        parse_duration(text)
    # The CRD pattern agrees with the parser.
    assert not re.fullmatch(DURATION_PATTERN, text)


@given(st.integers(min_value=0, max_value=10_000_000))
def test_format_seconds_round_trips(millis: int) -> None:
    seconds = millis / 1000
    assert parse_duration(format_seconds(seconds)) == pytest.approx(seconds)


class _Timed(BaseModel):
    every: Annotated[Duration, within(0.1, 300)]


def test_duration_fields_enforce_their_range_and_refuse_numbers() -> None:
    assert _Timed(every="250ms").every.seconds == 0.25  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="between 100ms and 5m"):
        _Timed(every="10m")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not a number"):
        _Timed(every=5)  # type: ignore[arg-type]
    assert _Timed(every="1m").model_dump(mode="json") == {"every": "1m"}


def test_durations_compare_by_length() -> None:
    assert Duration.parse("60s") == Duration.parse("1m")
    assert hash(Duration.parse("60s")) == hash(Duration.parse("1m"))
    assert Duration.parse("1s") != Duration.parse("2s")


@pytest.mark.parametrize(
    ("address", "host", "port"),
    [
        ("site.example.com:7946", "site.example.com", 7946),
        ("10.0.0.5:1", "10.0.0.5", 1),
        ("[::1]:7946", "::1", 7946),
        ("[fd00::5]:65535", "fd00::5", 65535),
        ("localhost:8080", "localhost", 8080),
        ("East-Edge.Example:443", "East-Edge.Example", 443),
    ],
)
def test_host_port_addresses_split(address: str, host: str, port: int) -> None:
    assert split_host_port(address) == (host, port)
    assert re.fullmatch(HOST_PORT_PATTERN, address)


@pytest.mark.parametrize(
    ("address", "complaint"),
    [
        ("site.example.com", "host:port"),
        ("site.example.com:0", "port must be a number from 1 to 65535"),
        ("site.example.com:65536", "port must be a number from 1 to 65535"),
        ("site.example.com:http", "port must be a number"),
        ("::1:7946", "IPv6 host must be in brackets"),
        ("[not-ipv6]:7946", "not a valid bracketed IPv6"),
        ("[::g]:7946", "not a valid bracketed IPv6"),
        ("-bad.example:7946", "not a valid DNS name"),
        ("bad_name.example:7946", "not a valid DNS name"),
        (":7946", "not a valid DNS name"),
    ],
)
def test_bad_addresses_say_what_is_wrong(address: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        split_host_port(address)


@pytest.mark.parametrize("address", ["site.example.com:0", "site:65536", "::1:7946", "a b:1"])
def test_the_crd_address_pattern_rejects_what_the_model_rejects(address: str) -> None:
    assert not re.fullmatch(HOST_PORT_PATTERN, address)


class _Addressed(BaseModel):
    address: HostPort


def test_host_port_field_keeps_the_text() -> None:
    assert _Addressed(address="[::1]:7946").address == "[::1]:7946"
    with pytest.raises(ValidationError, match="port must be"):
        _Addressed(address="x:99999")


def test_fingerprints_normalise_from_both_forms() -> None:
    digest = hashlib.sha256(b"certificate").hexdigest()
    colon = ":".join(digest[i : i + 2] for i in range(0, 64, 2)).upper()
    assert normalize_fingerprint(digest) == digest
    assert normalize_fingerprint(digest.upper()) == digest
    assert normalize_fingerprint(colon) == digest
    assert re.fullmatch(FINGERPRINT_PATTERN, colon)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ab" * 31,  # 62 digits
        "ab" * 33,  # 66 digits
        "zz" * 32,
        ":".join(["ab"] * 31),  # 31 pairs
        "ab:" * 31 + "a",
        "ab" * 16 + ":" + "ab" * 15 + "a",  # colons in the wrong places
    ],
)
def test_bad_fingerprints_are_rejected(value: str) -> None:
    with pytest.raises(ValueError, match="SHA-256 certificate fingerprint"):
        normalize_fingerprint(value)
    assert not re.fullmatch(FINGERPRINT_PATTERN, value)


class _Priced(BaseModel):
    price: Price


@pytest.mark.parametrize(
    ("value", "amount", "wire"),
    [(3, Decimal(3), 3), ("0.25", Decimal("0.25"), "0.25"), ("10", Decimal(10), 10), (0, 0, 0)],
)
def test_prices_accept_whole_numbers_and_decimal_strings(
    value: object, amount: Decimal, wire: object
) -> None:
    priced = _Priced(price=value)  # type: ignore[arg-type]
    assert priced.price == amount
    assert priced.model_dump(mode="json") == {"price": wire}


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        (0.25, 'quoted decimal string such as "0.25"'),
        (-1, "between 0 and 1000000"),
        ("-1", "non-negative decimal"),
        ("1e3", "non-negative decimal"),
        ("NaN", "non-negative decimal"),
        ("2000000", "between 0 and 1000000"),
        (True, "not true/false"),
        (None, "non-negative decimal"),
    ],
)
def test_bad_prices_are_rejected(value: object, complaint: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(complaint)):
        _Priced(price=value)  # type: ignore[arg-type]


class _Named(BaseModel):
    label: DnsLabel
    name: DnsSubdomain


def test_kubernetes_names() -> None:
    _Named(label="grid-system", name="glb-demo.example")
    with pytest.raises(ValidationError, match="DNS label"):
        _Named(label="Grid", name="ok")
    with pytest.raises(ValidationError, match="at most 63"):
        _Named(label="a" * 64, name="ok")
    with pytest.raises(ValidationError, match="DNS subdomain"):
        _Named(label="ok", name="-bad")
    assert re.fullmatch(DNS_SUBDOMAIN_PATTERN, "a.b-c.d")
