"""Replicated records and their items: validation, canonical encoding, strict decoding.

The hypothesis strategies here are shared with ``test_crdt_state.py``.
"""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid.crdt import (
    LANES,
    MAX_ITEM_BYTES,
    PHASES,
    CredentialRef,
    GatewayRecord,
    GridState,
    Item,
    LabelSelector,
    ModelEntry,
    ProviderMetrics,
    ProviderRecord,
    ProviderSpec,
    SelectorRequirement,
    SiteMetadata,
    TokenCost,
    decode_item,
    micro_usd,
)
from grid.crdt.codec import MAX_KEY_BYTES, MAX_SAFE_INT, canonical_json, item_bytes
from grid.crdt.pages import SignalsPage, encode_page, entry_bytes
from grid.crdt.records import AUTH_STRATEGIES, BACKEND_KINDS, MAX_AMOUNT, PROVIDER_KINDS
from grid.crdt.signals import SignalsState, decode_signals, site_tag
from grid.crdt.snapshot import (
    MAX_PROVIDER_NAME,
    ProviderState,
    SpendSlot,
    encode_provider,
    encode_signals,
)
from grid.errors import CrdtDecodeError, CrdtForgedItemError, CrdtLimitError, CrdtValueError
from grid.models.common import AuthStrategy, BackendKind, ProviderKind
from grid.models.provider import InferenceProviderPhase

# ---------------------------------------------------------------------------------------
# Strategies

dns_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?", fullmatch=True)
catalog_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,11}", fullmatch=True)
label_names = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,6}[A-Za-z0-9])?", fullmatch=True)
label_keys = st.one_of(label_names, st.builds("{}/{}".format, dns_names, label_names))
label_maps = st.dictionaries(label_keys, st.one_of(st.just(""), label_names), max_size=2)

requirements = st.one_of(
    st.builds(
        SelectorRequirement,
        label_keys,
        st.sampled_from(["In", "NotIn"]),
        st.lists(label_names, min_size=1, max_size=2).map(tuple),
    ),
    st.builds(SelectorRequirement, label_keys, st.sampled_from(["Exists", "DoesNotExist"])),
)
selectors = st.builds(LabelSelector, label_maps, st.lists(requirements, max_size=2).map(tuple))
specs = st.builds(
    ProviderSpec,
    backend_kind=st.sampled_from(sorted(BACKEND_KINDS)),
    provider_kind=st.sampled_from(sorted(PROVIDER_KINDS)),
    upstream=catalog_names,
    endpoint=st.builds("https://{}.svc:8443/v1".format, dns_names),
    cost=st.none() | st.builds(TokenCost, st.integers(0, 10**9), st.integers(0, 10**9)),
    credential=st.none()
    | st.builds(
        CredentialRef, st.sampled_from(sorted(AUTH_STRATEGIES)), dns_names, dns_names, dns_names
    ),
    access_policy=st.none() | selectors,
)
ratios = st.none() | st.integers(0, 1_000_000)
metrics = st.builds(
    ProviderMetrics,
    healthy=st.none() | st.booleans(),
    queue_depth_milli=st.none() | st.integers(0, 10**7),
    kv_cache_utilization_ppm=ratios,
    prefix_cache_hit_ppm=ratios,
    p99_latency_us=st.none() | st.integers(0, 10**8),
)
models = st.builds(
    ModelEntry,
    catalog_names,
    st.lists(catalog_names, max_size=2).map(tuple),
    st.none() | st.integers(1, 10**6),
)


def provider_records(
    names: st.SearchStrategy[str] = dns_names,
) -> st.SearchStrategy[ProviderRecord]:
    """Valid provider records small enough for one item."""
    return st.builds(
        ProviderRecord,
        name=names,
        spec=specs,
        phase=st.sampled_from(PHASES),
        metrics=metrics,
        models=st.lists(models, max_size=3, unique_by=lambda entry: entry.name).map(tuple),
        tools=st.lists(catalog_names, max_size=2).map(tuple),
        agents=st.lists(catalog_names, max_size=2).map(tuple),
    )


site_metadata = st.builds(
    SiteMetadata,
    region=st.none() | dns_names,
    zone=st.none() | dns_names,
    sovereignty_zone=st.none() | dns_names,
    labels=label_maps,
    grid_id=st.none() | dns_names,
)
gateways = st.builds(
    GatewayRecord,
    st.builds("{}.example:{}".format, dns_names, st.integers(1, 65535))
    | st.builds("192.0.2.{}:{}".format, st.integers(1, 254), st.integers(1, 65535)),
    st.sampled_from(["mtls", "tls", "none"]),
    st.none() | st.builds("{}.example".format, dns_names),
)


def sample_record(name: str = "llama", **changes: object) -> ProviderRecord:
    record = ProviderRecord(
        name=name,
        spec=ProviderSpec(
            "local",
            "self_hosted",
            "llama-cluster",
            "https://llama.svc:8000/v1",
            cost=TokenCost.from_usd("0.15", "0.60"),
            credential=CredentialRef("BearerToken", "llama-token", "grid", "token"),
            access_policy=LabelSelector(
                {"tier": "gold"}, (SelectorRequirement("region", "In", ("eu", "us")),)
            ),
        ),
        phase="Available",
        metrics=ProviderMetrics.from_measurements(
            healthy=True,
            queue_depth=2.5,
            kv_cache_utilization=0.42,
            prefix_cache_hit_ratio=0.7,
            p99_latency_ms=850.25,
        ),
        models=(
            ModelEntry("meta-llama/Llama-3.1-8B-Instruct", ("chat", "tools"), 131_072),
            ModelEntry("text-embedding-3-small", ("embeddings",), 8191),
        ),
        tools=("web-search",),
        agents=("planner",),
    )
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


NOW = 1_750_000_000.0


def provider_items(site: str = "site-a", record: ProviderRecord | None = None) -> list[Item]:
    """The catalogue item of one newly written provider, and its signals as an item of their
    own (the layout before pages, which sites still take)."""
    state = GridState(site)
    record = record or sample_record()
    state.put_provider(record, NOW)
    catalogue, page = state.items_to_publish()
    assert catalogue.key.startswith("provider/") and page.key.startswith("signals-page/")
    return [catalogue, encode_signals(site, state.snapshot().signals[record.name])]


def provider_item(
    site: str = "site-a", record: ProviderRecord | None = None
) -> tuple[str, int, bytes]:
    item = provider_items(site, record)[0]
    return item.key, item.version, item.payload


def signals_item(
    site: str = "site-a", record: ProviderRecord | None = None
) -> tuple[str, int, bytes]:
    item = provider_items(site, record)[1]
    return item.key, item.version, item.payload


# ---------------------------------------------------------------------------------------
# Vocabulary and validation


def test_vocabularies_match_the_resource_models() -> None:
    assert {kind.value for kind in BackendKind} == BACKEND_KINDS
    assert {kind.value for kind in ProviderKind} == PROVIDER_KINDS
    assert {strategy.value for strategy in AuthStrategy} == AUTH_STRATEGIES
    assert tuple(phase.value for phase in InferenceProviderPhase) == PHASES


def test_item_limits_match_the_gossip_transport() -> None:
    from grid import _native

    assert MAX_ITEM_BYTES == _native.MAX_ITEM_LEN
    assert MAX_KEY_BYTES == _native.MAX_KEY_LEN
    assert set(LANES) == set(_native.LANES)


def test_names_that_would_not_fit_a_key_or_a_site_id_are_refused() -> None:
    longest = "p" * (MAX_KEY_BYTES - len("provider/"))
    assert len(longest) == MAX_PROVIDER_NAME
    state = GridState("site-a")
    assert state.put_provider(sample_record(name=longest), NOW)
    assert all(len(item.key) <= MAX_KEY_BYTES for item in state.items_to_publish())
    with pytest.raises(CrdtValueError, match="provider names are limited"):
        GridState("site-a").put_provider(sample_record(name=longest + "p"), NOW)
    assert GridState("s" * 63).site == "s" * 63
    for bad in ("s" * 64, "site a", "site#1", "site/1", ""):
        with pytest.raises(CrdtValueError):
            GridState(bad)


def test_money_is_counted_in_integer_micro_usd() -> None:
    assert micro_usd(0.15) == 150_000
    assert micro_usd("2.50") == 2_500_000
    assert micro_usd(Decimal("1.0000015")) == 1_000_002  # half to even
    assert micro_usd(3) == 3_000_000
    cost = TokenCost.from_usd(0.1, 0.3)
    assert (cost.input_micro_usd, cost.output_micro_usd) == (100_000, 300_000)
    assert cost.output_per_million == Decimal("0.3")
    for bad in (-1, "abc", float("nan"), float("inf"), True, "1e30"):
        with pytest.raises(CrdtValueError):
            micro_usd(bad)


def test_metrics_are_fixed_point_and_read_back_as_floats() -> None:
    metrics = ProviderMetrics.from_measurements(
        healthy=False, queue_depth=3.25, kv_cache_utilization=0.5, p99_latency_ms=12.5
    )
    assert metrics.queue_depth_milli == 3250 and metrics.queue_depth == 3.25
    assert metrics.kv_cache_utilization == 0.5
    assert metrics.prefix_cache_hit_ratio is None
    assert metrics.p99_latency_ms == 12.5
    for bad in ({"kv_cache_utilization_ppm": 1_000_001}, {"queue_depth_milli": -1}):
        with pytest.raises(CrdtValueError):
            ProviderMetrics(**bad)  # type: ignore[arg-type]
    with pytest.raises(CrdtValueError):
        ProviderMetrics.from_measurements(queue_depth=float("nan"))
    with pytest.raises(CrdtValueError):
        ProviderMetrics(healthy=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "endpoint",
    [
        "https://user:hunter2@llama.svc/v1",
        "https://llama.svc/v1?api_key=sk-hunter2",
        "https://llama.svc/v1#sk-hunter2",
        "ftp://llama.svc/v1",
        "https://llama.svc:99999/v1",
        "https://[::1/v1",
        "https://llama svc/v1",
        "",
    ],
)
def test_endpoints_that_could_carry_a_credential_or_are_malformed_are_refused(
    endpoint: str,
) -> None:
    with pytest.raises(CrdtValueError) as caught:
        ProviderSpec("remote", "open_ai", "openai", endpoint)
    assert "hunter2" not in str(caught.value)


def test_no_record_field_can_hold_a_token() -> None:
    allowed = {
        "name", "spec", "phase", "metrics", "models", "tools", "agents",
        "backend_kind", "provider_kind", "upstream", "endpoint", "cost", "credential",
        "access_policy", "strategy", "secret_name", "namespace", "key",
        "input_micro_usd", "output_micro_usd", "match_labels", "match_expressions",
        "operator", "values", "healthy", "queue_depth_milli", "kv_cache_utilization_ppm",
        "prefix_cache_hit_ppm", "p99_latency_us", "capabilities", "context_window",
    }  # fmt: skip
    types = [ProviderRecord, ProviderSpec, CredentialRef, TokenCost, LabelSelector]
    types += [SelectorRequirement, ProviderMetrics, ModelEntry]
    for kind in types:
        assert {f.name for f in dataclasses.fields(kind)} <= allowed, kind


@pytest.mark.parametrize(
    "build",
    [
        lambda: sample_record(name="Not_A_DNS_Name"),
        lambda: sample_record(phase="Running"),
        lambda: sample_record(models=(ModelEntry("a"), ModelEntry("a", ("chat",)))),
        lambda: sample_record(tools="web-search"),
        lambda: sample_record(tools=(1,)),
        lambda: ModelEntry("gpt 4o"),
        lambda: ModelEntry("gpt-4o", context_window=0),
        lambda: ProviderSpec("edge", "open_ai", "c", "https://x.example"),
        lambda: ProviderSpec("local", "mistral", "c", "https://x.example"),
        lambda: ProviderSpec("local", "open_ai", "", "https://x.example"),
        lambda: CredentialRef("Password", "name", "ns", "key"),
        lambda: CredentialRef("ApiKey", "Name!", "ns", "key"),
        lambda: SelectorRequirement("tier", "In"),
        lambda: SelectorRequirement("tier", "Exists", ("gold",)),
        lambda: SelectorRequirement("tier", "Near", ("gold",)),
        lambda: SelectorRequirement("bad key!", "Exists"),
        lambda: LabelSelector({"tier": "gold silver"}),
        lambda: GatewayRecord("gw.example", "mtls"),
        lambda: GatewayRecord("gw.example:0", "mtls"),
        lambda: GatewayRecord("gw.example:65536", "mtls"),
        lambda: GatewayRecord("[::zz]:443", "mtls"),
        lambda: GatewayRecord("bad host:443", "mtls"),
        lambda: GatewayRecord("gw.example:443", "m tls"),
        lambda: GatewayRecord("192.0.2.1:443", "mtls", "not a name"),
        lambda: SiteMetadata(region="eu west"),
        lambda: SiteMetadata(labels={"tier": 1}),  # type: ignore[dict-item]
        lambda: TokenCost(-1, 0),
        lambda: TokenCost(1.5, 0),  # type: ignore[arg-type]
    ],
)
def test_invalid_records_are_refused_with_a_clear_error(build: object) -> None:
    with pytest.raises(CrdtValueError):
        build()  # type: ignore[operator]


def test_credentials_name_a_secret_entirely_or_not_at_all() -> None:
    assert CredentialRef("MtlsOnly").to_wire() == {"strategy": "MtlsOnly"}
    full = CredentialRef("ApiKey", "openai-key", "grid", "api-key")
    assert CredentialRef.from_wire(full.to_wire(), "cred") == full
    with pytest.raises(CrdtValueError, match="name, namespace and key"):
        CredentialRef("ApiKey", "openai-key")


def test_model_names_follow_the_resource_rule() -> None:
    for name in ("gpt-4o", "anthropic.claude-3-5-sonnet-20240620-v1:0", "modèle~1", "m" * 256):
        entry = ModelEntry(name)
        state = GridState("site-a")
        state.put_provider(sample_record(models=(entry,)), NOW)
        item, _ = state.items_to_publish()
        decoded = decode_item("site-a", item.lane, item.key, item.version, item.payload)
        assert isinstance(decoded, ProviderState) and entry in decoded.models.elements
    for bad in ("gpt 4o", "", "m" * 257, "gpt\n4o", "\ud800"):
        with pytest.raises(CrdtValueError):
            ModelEntry(bad)


def test_valid_gateway_addresses() -> None:
    for address in ("gw.site-a.example:443", "10.0.0.1:7946", "[::1]:443", "[fe80::1]:8443"):
        assert GatewayRecord(address, "mtls").address == address


def test_selectors_are_kept_in_one_order_and_convert_to_kubernetes_form() -> None:
    a = SelectorRequirement("region", "In", ("us", "eu", "eu"))
    b = SelectorRequirement("gpu", "Exists")
    assert LabelSelector({}, (a, b)) == LabelSelector({}, (b, a))
    assert a.values == ("eu", "us")
    assert LabelSelector({"tier": "gold"}, (a,)).as_kubernetes() == {
        "matchLabels": {"tier": "gold"},
        "matchExpressions": [{"key": "region", "operator": "In", "values": ["eu", "us"]}],
    }


def test_records_normalize_their_collections() -> None:
    record = sample_record(tools=("b", "a", "b"), models=(ModelEntry("z"), ModelEntry("a")))
    assert record.tools == ("a", "b")
    assert [entry.name for entry in record.models] == ["a", "z"]


# ---------------------------------------------------------------------------------------
# Canonical encoding


@settings(max_examples=60)
@given(provider_records(), st.lists(provider_records(st.just("p")), max_size=3))
def test_provider_items_round_trip_and_are_canonical(
    first: ProviderRecord, rewrites: list[ProviderRecord]
) -> None:
    state = GridState("site-a")
    state.put_provider(first, NOW)
    for offset, record in enumerate(rewrites, start=1):
        state.put_provider(record, NOW + offset)
        if offset == 2:
            state.remove_provider(record.name, NOW + offset + 0.5)
    paged = set()
    for item in state.all_items():
        assert item_bytes("site-a", item.key, item.payload) <= MAX_ITEM_BYTES
        decoded = decode_item("site-a", item.lane, item.key, item.version, item.payload)
        if isinstance(decoded, ProviderState):
            assert decoded == state.snapshot().providers[decoded.name]
            assert encode_provider("site-a", decoded) == item
        else:
            assert isinstance(decoded, SignalsPage)
            for register in decoded.states:
                if register == state.snapshot().signals[register.name]:
                    paged.add(register.name)
            payload = encode_page("site-a", decoded.number, decoded.version, decoded.states)
            assert payload == item.payload
    assert paged == set(state.snapshot().signals)


@given(site_metadata, gateways)
def test_site_items_round_trip(metadata: SiteMetadata, gateway: GatewayRecord) -> None:
    state = GridState("site-a")
    state.set_metadata(metadata, NOW)
    state.set_gateway(gateway, NOW)
    receiver = GridState("site-b")
    for item in state.items_to_publish():
        assert receiver.apply_item("site-a", item.lane, item.key, item.version, item.payload, NOW)
    assert receiver.metadata("site-a") == metadata
    assert receiver.gateway("site-a") == gateway
    assert receiver.snapshot("site-a").items() == state.snapshot().items()


def test_item_bytes_are_canonical_json_behind_a_format_byte() -> None:
    key, version, payload = provider_item()
    assert key == "provider/llama"
    assert payload[0] == 2
    body = json.loads(payload[1:])
    assert payload[1:] == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert body["site"] == "site-a" and body["rev"] == version
    assert body["spec"][1]["cost"] == [150_000, 600_000]
    assert "metrics" not in body and "phase" not in body
    json.loads(payload[1:], parse_float=lambda text: pytest.fail(f"float {text} on the wire"))
    assert len(payload) < 600
    # The signals: [rev, site tag, at offset, phase, healthy, queue, kv, prefix, p99].
    key, version, payload = signals_item()
    assert key == "signals/llama" and payload[0] == 2
    assert json.loads(payload[1:]) == [
        version, site_tag("site-a"), 0, 1, True, 2_500, 420_000, 700_000, 850_250,
    ]  # fmt: skip
    assert payload[1:] == canonical_json(json.loads(payload[1:]))


def test_the_largest_signals_item_fits_128_bytes() -> None:
    # Maximal values everywhere, the longest site id and provider name, the largest
    # revision, and a writer clock at 0 so the offset is as long as the revision.
    site, name = "s" * 63, "p" * MAX_PROVIDER_NAME
    metrics = ProviderMetrics(False, MAX_AMOUNT, 1_000_000, 1_000_000, MAX_AMOUNT)
    longest = max(
        (SignalsState.written(site, name, MAX_SAFE_INT, 0, phase, metrics) for phase in PHASES),
        key=lambda state: len(state.payload),
    )
    assert len(longest.payload) <= 128
    item = encode_signals(site, longest)
    assert item_bytes(site, item.key, item.payload) <= MAX_ITEM_BYTES
    assert len(item.key) == MAX_KEY_BYTES - 1
    assert decode_item(site, item.lane, item.key, item.version, item.payload) == longest
    # In a page, a register takes its name and fewer bytes than its own item's payload.
    state = GridState(site)
    state.put_provider(sample_record(name=name, phase="Unavailable", metrics=metrics), NOW)
    _, page = state.items_to_publish()
    assert item_bytes(site, page.key, page.payload) <= MAX_ITEM_BYTES
    (register,) = state.snapshot().signals.values()
    assert len(entry_bytes(register)) - len(name) < len(longest.payload)
    # A page for one load change of a provider with a usual name stays within 128 bytes.
    state = GridState("site-a")
    state.put_provider(sample_record(name="llama-3-70b-eu", metrics=metrics), NOW)
    _, page = state.items_to_publish()
    assert len(page.payload) <= 128


def test_a_record_too_large_for_one_item_is_refused_and_changes_nothing() -> None:
    state = GridState("site-a")
    state.put_provider(sample_record(), NOW)
    state.items_to_publish()
    huge = sample_record(
        models=tuple(
            ModelEntry(f"organization/model-{i:03d}-instruct", ("chat",)) for i in range(40)
        )
    )
    with pytest.raises(CrdtLimitError, match="1024-byte limit"):
        state.put_provider(huge, NOW + 1)
    entry = state.provider("site-a", "llama")
    assert entry is not None and entry.record == sample_record()
    assert state.items_to_publish() == []


# ---------------------------------------------------------------------------------------
# Strict decoding


def _reframe(body: object) -> bytes:
    return b"\x02" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _decode(
    payload: bytes, version: int, key: str = "provider/llama", origin: str = "site-a"
) -> object:
    return decode_item(origin, "state", key, version, payload)


def test_every_truncation_is_refused() -> None:
    key, version, payload = provider_item()
    for end in range(len(payload)):
        with pytest.raises(CrdtDecodeError):
            _decode(payload[:end], version, key)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: p + b" " * (MAX_ITEM_BYTES + 1 - len(p)), "1024-byte limit"),
        (lambda p: b"\x01" + p[1:], "format 1"),
        (lambda p: p[:-1] + b"\xff}", "ASCII"),
        (lambda p: p[:-1] + b" }", "canonical"),
        (lambda p: p.replace(b'"at":', b'"at":1,"at":', 1), "repeats a key"),
        (lambda p: p.replace(b'"at":', b'"at":1.5,"x":', 1), "non-integer"),
        (lambda p: p.replace(b'"at":', b'"at":NaN,"x":', 1), "NaN"),
        (lambda p: p.replace(b'{"agents"', b'[{"agents"', 1) + b"]", "must be an object"),
    ],
)
def test_malformed_payloads_are_refused(mutate: object, message: str) -> None:
    key, version, payload = provider_item()
    with pytest.raises(CrdtDecodeError, match=message):
        _decode(mutate(payload), version, key)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b.update(extra=1), "unknown fields extra"),
        (lambda b: b.pop("spec"), "lacks spec"),
        (lambda b: b.update(metrics=[0, {}]), "unknown fields metrics"),
        (lambda b: b.update(at=True), "at: must be an integer"),
        (lambda b: b.update(at=-1), "at: must be between"),
        (lambda b: b.update(name="other"), "does not match the item key"),
        (lambda b: b["spec"].__setitem__(0, -1), "spec offset"),
        (lambda b: b["spec"].__setitem__(0, b["rev"]), "spec offset"),
        (lambda b: b["spec"][1].update(endpoint="https://u:p@x.example"), "user info"),
        (lambda b: b["spec"][1].update(cost=["1", 2]), "must be an integer"),
        (lambda b: b["models"][1][0][0].__setitem__(2, 0), "between 1 and"),
        (lambda b: b["tools"][1][0].__setitem__(1, [0, 0]), "canonical"),
        (lambda b: b["tools"][1].append(b["tools"][1][0]), "repeats an element"),
        (lambda b: b["tools"].__setitem__(0, b["rev"]), "outside the causal context"),
        (lambda b: b["models"][1].reverse(), "canonical"),
        (lambda b: b["models"][1][0].__setitem__(0, ["m", [], 0]), "context.*between"),
    ],
)
def test_inconsistent_bodies_are_refused(edit: object, message: str) -> None:
    key, version, payload = provider_item()
    body = json.loads(payload[1:])
    edit(body)  # type: ignore[operator]
    with pytest.raises(CrdtDecodeError, match=message):
        _decode(_reframe(body), version, key)


def test_version_key_and_lane_must_agree_with_the_payload() -> None:
    key, version, payload = provider_item()
    with pytest.raises(CrdtDecodeError, match="version"):
        _decode(payload, version + 1, key)
    with pytest.raises(CrdtDecodeError, match="unknown lane"):
        decode_item("site-a", "status", key, version, payload)
    with pytest.raises(CrdtDecodeError, match="unknown key"):
        decode_item("site-a", "gateway", key, version, payload)
    with pytest.raises(CrdtDecodeError):
        decode_item("site-a", "state", "provider/Bad_Name", version, payload)
    with pytest.raises(CrdtDecodeError):
        decode_item("site-a", "state", "budget/acme/2025-06/007", version, payload)
    with pytest.raises(CrdtDecodeError):
        decode_item("site a", "state", key, version, payload)
    with pytest.raises(CrdtDecodeError):
        decode_item("site-a", "state", key, 0, payload)
    with pytest.raises(CrdtDecodeError):
        decode_item("site-a", "state", key, version, bytearray(payload))  # type: ignore[arg-type]


def _every_kind_of_item() -> list[Item]:
    state = GridState("site-a")
    state.put_provider(sample_record(), NOW)
    state.set_gateway(GatewayRecord("gw.site-a.example:443", "mtls"), NOW)
    state.set_metadata(SiteMetadata(region="eu-west", labels={"tier": "gold"}), NOW)
    head, tail = "-----BEGIN CERTIFICATE-----\n", "\n-----END CERTIFICATE-----\n"
    state.set_cert(head + "QUJD" * 200 + tail, NOW)
    state.add_spend("acme", "2025-06", 1_234, NOW)
    return state.all_items()


@pytest.mark.parametrize("item", _every_kind_of_item(), ids=lambda item: item.key)
def test_every_kind_of_item_round_trips_and_refuses_truncation_and_forgery(item: Item) -> None:
    decoded = decode_item("site-a", item.lane, item.key, item.version, item.payload)
    receiver = GridState("site-b")
    assert receiver.apply_item("site-a", item.lane, item.key, item.version, item.payload, NOW)
    if isinstance(decoded, SignalsPage):
        assert dict(receiver.snapshot("site-a").signals) == {s.name: s for s in decoded.states}
    elif not isinstance(decoded, SpendSlot):
        (again,) = [i for i in receiver.snapshot("site-a").items() if i.key == item.key]
        assert again == item
    for end in range(len(item.payload)):
        with pytest.raises(CrdtDecodeError):
            decode_item("site-a", item.lane, item.key, item.version, item.payload[:end])
    with pytest.raises(CrdtForgedItemError):
        decode_item("site-b", item.lane, item.key, item.version, item.payload)
    with pytest.raises(CrdtDecodeError, match="version"):
        decode_item("site-a", item.lane, item.key, item.version + 1, item.payload)


def test_an_item_about_another_site_is_refused_as_forged() -> None:
    key, version, payload = provider_item(site="site-a")
    with pytest.raises(CrdtForgedItemError, match="'site-b' describes site 'site-a'"):
        _decode(payload, version, key, origin="site-b")


@settings(max_examples=300, deadline=None)
@given(st.data(), st.sampled_from(["provider", "signals"]))
def test_random_corruption_is_refused_or_decodes_to_a_valid_item(
    data: st.DataObject, kind: str
) -> None:
    key, version, payload = provider_item() if kind == "provider" else signals_item()
    corrupted = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(corrupted) - 1))
        corrupted[index] = data.draw(st.integers(0, 255))
    try:
        decoded = _decode(bytes(corrupted), version, key)
    except CrdtDecodeError:
        return
    # It still decoded: then it is a valid state whose one encoding is exactly these bytes.
    if isinstance(decoded, ProviderState):
        assert encode_provider("site-a", decoded).payload == bytes(corrupted)
    else:
        assert isinstance(decoded, SignalsState)
        assert encode_signals("site-a", decoded).payload == bytes(corrupted)


# ---------------------------------------------------------------------------------------
# Signals items: a hand-written reader, held to the same strictness


def _signals(*entries: object, fmt: bytes = b"\x02") -> bytes:
    return fmt + json.dumps(list(entries), separators=(",", ":")).encode()


REV = 1_750_000_000_000
TAG = site_tag("site-a")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "empty"),
        (b"\x02", "not JSON"),
        (_signals(REV, TAG, 0, 1, True, 1, 2, 3, 4, fmt=b"\x01"), "format 1"),
        (b"\x02[%d, %d,0]" % (REV, TAG), "canonical"),
        (b"\x02[%d,%d,00]" % (REV, TAG), "not JSON"),
        (b"\x02[%d,%d,0,1,true,1,2,3,4.0]" % (REV, TAG), "non-integer"),
        (b"\x02[%d,%d,0,1,true,1,2,3,1e3]" % (REV, TAG), "non-integer"),
        (b"\x02[%d,%d,0,1,true,1,2,3,-4]" % (REV, TAG), "p99: must be between"),
        (b"\x02[%d,%d,0,1,true,1,2,3,NaN]" % (REV, TAG), "NaN"),
        (b"\x02[%d,%d,0,1,True,1,2,3,4]" % (REV, TAG), "not JSON"),
        (b"\x02[%d,%d,0,1,\xff,1,2,3,4]" % (REV, TAG), "ASCII"),
        (_signals(REV, TAG, 0, 1, True, 1, 2, 3), "3 or 9 entries"),
        (_signals(REV, TAG, 0, 1, True, 1, 2, 3, 4, 5), "3 or 9 entries"),
        (_signals(REV, TAG), "3 or 9 entries"),
        (b"\x02{}", "must be an array"),
        (_signals(REV, TAG, 0, 4, True, 1, 2, 3, 4), "phase: must be between 0 and 3"),
        (_signals(REV, TAG, 0, "Available", True, 1, 2, 3, 4), "phase: must be an integer"),
        (_signals(REV, TAG, 0, 1, 1, 1, 2, 3, 4), "healthy: must be true or false"),
        (_signals(REV, TAG, 0, 1, True, MAX_AMOUNT + 1, 2, 3, 4), "queue: must be between"),
        (_signals(REV, TAG, 0, 1, True, 1, 1_000_001, 3, 4), "kv: must be between"),
        (_signals(REV, TAG, 0, 1, True, 1, 2, 10**7, 4), "prefix: must be between"),
        (_signals(REV, TAG, 0, 1, True, 1, 2, 3, MAX_AMOUNT + 1), "p99: must be between"),
        (_signals(REV, TAG, 0, 1, True, 1, True, 3, 4), "kv: must be an integer"),
        (_signals(REV, TAG, REV + 1, 1, None, None, None, None, None), "at offset"),
        (_signals(REV, TAG, None), "at offset: must be an integer"),
        (_signals(REV, 10**10, 0), "site tag: must be between"),
        (_signals(REV, 2**32, 0), "another site's tag"),
        (_signals(REV + 1, TAG, 0), "rev: differs from the item version"),
        (_signals(REV, TAG, 0) + b" ", "canonical"),
        (b"\x02[%d,%d,0]\n" % (REV, TAG), "canonical"),
    ],
)
def test_malformed_signals_are_refused_with_a_clear_message(payload: bytes, message: str) -> None:
    receiver = GridState("site-b")
    with pytest.raises(CrdtDecodeError, match=message):
        receiver.apply_item("site-a", "state", "signals/llama", REV, payload, NOW)
    assert receiver.sites() == ("site-b",) and receiver.providers() == ()


def test_signals_keys_versions_and_origins_are_checked() -> None:
    key, version, payload = signals_item()
    receiver = GridState("site-b")
    for origin, name, at_version, data in [
        ("site a", "llama", version, payload),
        ("site-a", "Bad_Name", version, payload),
        ("site-a", "p" * (MAX_PROVIDER_NAME + 1), version, payload),
        ("site-a", "llama", version + 1, payload),
        ("site-a", "llama", 0, payload),
        ("site-a", "llama", True, payload),
        ("site-a", "llama", version, bytearray(payload)),
    ]:
        with pytest.raises(CrdtDecodeError):
            receiver.apply_item(origin, "state", f"signals/{name}", at_version, data, NOW)  # type: ignore[arg-type]
        with pytest.raises(CrdtDecodeError):
            decode_item(origin, "state", f"signals/{name}", at_version, data)  # type: ignore[arg-type]
    with pytest.raises(CrdtForgedItemError, match="another site's tag"):
        receiver.apply_item("site-c", "state", key, version, payload, NOW)
    with pytest.raises(CrdtForgedItemError):  # found also when the payload is not canonical
        receiver.apply_item("site-c", "state", key, version, payload + b" ", NOW)
    assert receiver.sites() == ("site-b",)
    assert receiver.apply_item("site-a", "state", key, version, payload, NOW)


signals_states = st.builds(
    lambda rev, back, phase, metrics: SignalsState.written(
        "site-a", "llama", rev, max(0, rev - back), phase, None if phase is None else metrics
    ),
    st.integers(1, MAX_SAFE_INT),
    st.integers(0, 10**6) | st.just(MAX_SAFE_INT),
    st.none() | st.sampled_from(PHASES),
    metrics,
)


@given(signals_states)
def test_signals_round_trip_in_their_one_canonical_form(state: SignalsState) -> None:
    payload = state.payload
    assert payload[1:] == canonical_json(json.loads(payload[1:]))
    assert decode_signals("site-a", "llama", state.version, payload) == state


json_numbers = st.one_of(
    st.integers(-5, 3 * MAX_AMOUNT),
    st.integers(0, 2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, 3, 4, TAG, REV]),
)
json_entries = st.one_of(json_numbers, st.none(), st.booleans(), st.text(max_size=3))


@st.composite
def signals_lists(draw: st.DrawFn) -> list[object]:
    """A valid signals list with a few entries replaced, dropped or added."""
    state = draw(signals_states)
    entries: list[object] = json.loads(state.payload[1:])
    entries[0], entries[1] = REV, TAG
    entries[2] = min(entries[2], REV)  # type: ignore[type-var]
    for _ in range(draw(st.integers(0, 2))):
        edit = draw(st.sampled_from(["replace", "drop", "add"]))
        index = draw(st.integers(0, len(entries) - 1))
        if edit == "replace":
            entries[index] = draw(json_entries)
        elif edit == "drop" and len(entries) > 1:
            del entries[index]
        else:
            entries.insert(index, draw(json_entries))
    return entries


@settings(max_examples=500, deadline=None)
@given(
    signals_lists(),
    st.sampled_from([(",", ":"), (",", ":"), (", ", ": ")]),
    st.sampled_from(["", "", " ", "\n"]),
)
def test_the_signals_reader_agrees_with_the_generic_json_reader(
    entries: list[object], separators: tuple[str, str], padding: str
) -> None:
    # Differential: a payload decodes exactly when it is the canonical encoding of a list
    # the generic strict reader finds valid, and then to the state it describes.
    text = padding + json.dumps(entries, separators=separators) + padding
    payload = b"\x02" + text.encode()
    try:
        decoded = decode_signals("site-a", "llama", REV, payload)
    except CrdtDecodeError:
        decoded = None
    valid = (
        len(entries) in (3, 9)
        and all(type(v) is int for v in entries[:3])
        and entries[0] == REV
        and entries[1] == TAG
        and 0 <= entries[2] <= REV  # type: ignore[operator]
        and (
            len(entries) == 3
            or (
                type(entries[3]) is int
                and 0 <= entries[3] <= 3
                # Not `in (None, True, False)`: 0 == False, and JSON 0 is no boolean.
                and (entries[4] is None or type(entries[4]) is bool)
                and all(
                    v is None or (type(v) is int and 0 <= v <= high)
                    for v, high in zip(
                        entries[5:], (MAX_AMOUNT, 1_000_000, 1_000_000, MAX_AMOUNT), strict=True
                    )
                )
            )
        )
    )
    try:
        canonical = payload == b"\x02" + canonical_json(entries)  # type: ignore[arg-type]
    except ValueError:  # NaN or Infinity: no canonical form at all
        canonical = False
    assert (decoded is not None) == (valid and canonical)
    if decoded is not None:
        assert decoded.payload == payload
        assert decoded.version == REV and decoded.at_ms == REV - entries[2]  # type: ignore[operator]


def test_a_gateway_server_name_travels_only_when_set() -> None:
    named = GatewayRecord("192.0.2.7:8443", "mutual_tls", "gw.example")
    assert named.to_wire() == {
        "address": "192.0.2.7:8443",
        "tls": "mutual_tls",
        "sni": "gw.example",
    }
    assert GatewayRecord.from_wire(named.to_wire(), "gateway") == named
    plain = GatewayRecord("gw.example:8443", "mutual_tls")
    assert plain.to_wire() == {"address": "gw.example:8443", "tls": "mutual_tls"}
