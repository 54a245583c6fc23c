"""Spend sources: Prometheus counters of spend (tokens, money) that a GridNetwork's sites
read, and what each site last read of them. The increase of each series between two
scrapes becomes spend of the tenant the series names, counted towards the tenant's budget
of the same unit (docs/resources.md, docs/crdt.md)."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import ConfigDict, Field, model_validator

from grid.models.common import GridModel
from grid.models.fields import (
    DNS_LABEL_PATTERN,
    TIMEOUT_WITHIN_INTERVAL,
    DnsLabel,
    DnsSubdomain,
    Duration,
    Token,
    within,
)
from grid.models.meta import Labels
from grid.models.provider import PROMETHEUS_METRIC_PATTERN, MetricMatchers, ScrapeStatus
from grid.models.selectors import LabelSelector, LabelSelectorRequirement
from grid.models.urls import HttpUrl
from grid.models.validation_rules import ValidationRule, present, validations

PROMETHEUS_LABEL_PATTERN = r"^[a-zA-Z_][a-zA-Z0-9_]*$"

TENANT_LABEL_OR_TENANT = ValidationRule(
    f"({present('tenantLabel')}) != ({present('tenant')})",
    "set either tenantLabel (the label naming each series' tenant) or tenant (the one tenant "
    "of every series), not both",
)


class SpendSiteSelector(LabelSelector):
    """A label selector of GridSites, with fewer terms than a provider's: every term costs
    the API server a rule evaluation per spend source."""

    match_labels: Labels = Field(default_factory=dict, max_length=8)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list, max_length=8)


class SpendSource(GridModel):
    """A Prometheus counter of spend, scraped by the sites ``siteSelector`` matches: the
    increase of each of its series since the previous scrape is spend of the series'
    tenant, in ``unit`` times ``scale``."""

    model_config = ConfigDict(
        json_schema_extra=validations(TENANT_LABEL_OR_TENANT, TIMEOUT_WITHIN_INTERVAL)
    )

    name: DnsLabel
    site_selector: SpendSiteSelector = Field(
        description="Labels of the GridSites that scrape this source, each counting what it "
        "reads as its own spend. Required, so that no source is read by every site by "
        "accident (which would count its spend once per site): {} selects every site, for a "
        "url that names each site's own exporter (an in-cluster Service name)."
    )
    url: HttpUrl = Field(
        description="Where the counter is served, e.g. http://litellm:4000/metrics."
    )
    server_name: DnsSubdomain | None = Field(
        None, description="TLS server name (SNI) to ask for and verify; default the url's host."
    )
    interval: Annotated[Duration, within(1, 3600)] = Duration.parse("15s")
    timeout: Annotated[Duration, within(0.1, 300)] = Duration.parse("5s")
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    metric: str = Field(
        pattern=PROMETHEUS_METRIC_PATTERN,
        max_length=256,
        description="The counter's sample name as served, e.g. litellm_total_tokens_metric_total, "
        "vllm:prompt_tokens_total, gen_ai_client_token_usage_sum.",
    )
    labels: MetricMatchers = Field(
        default_factory=dict, max_length=8, description="Label values a series must have to count."
    )
    tenant_label: str | None = Field(
        None,
        pattern=PROMETHEUS_LABEL_PATTERN,
        max_length=256,
        description="The label whose value names each series' tenant (e.g. team).",
    )
    tenant: Token | None = Field(
        None,
        description="The tenant of every series, for a counter without a tenant label (a "
        "budget per provider or per gateway).",
    )
    unit: str = Field(
        "tokens",
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="What the counter counts: it counts towards the budgets of this unit.",
    )
    scale: float = Field(
        1.0,
        gt=0,
        le=1e9,
        description="Multiplier from the counter's unit to the budget's (1000000: USD to "
        "microdollars). Fractions of a unit are carried to the next increase.",
    )

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if (self.tenant_label is None) == (self.tenant is None):
            raise ValueError(TENANT_LABEL_OR_TENANT.message)
        if self.timeout.seconds >= self.interval.seconds:
            raise ValueError(TIMEOUT_WITHIN_INTERVAL.message)
        return self


class SpendSourceStatus(GridModel):
    """What this site last read of one spend source it scrapes."""

    name: DnsLabel
    last_scrape: ScrapeStatus | None = None
    series: int = Field(0, ge=0, description="Series of the counter the last good scrape read.")
