"""Backend groups and locality tiers: whose capacity a candidate is, and how near its site is
to the consuming site."""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from grid.models.common import BackendKind, LocalityTier
from grid.scoring.inputs import CandidateInput, ConsumingSite


class BackendGroup(StrEnum):
    """Whose capacity a candidate is: the first cut of the spec's preference ladder ("use
    capacity you own and that is near before falling out to third-party APIs")."""

    SELF_HOSTED = "self_hosted"
    """``local`` or ``remote``: capacity the grid runs itself."""
    EXTERNAL = "external"
    """``cloud_managed`` or ``api_provider``: capacity bought from someone else."""


GROUP_ORDER: tuple[BackendGroup, ...] = (BackendGroup.SELF_HOSTED, BackendGroup.EXTERNAL)
"""Self-hosted first: within one admission state, every self-hosted candidate ranks before
every external one, whatever their tiers and scores."""

BACKEND_GROUP = MappingProxyType(
    {
        BackendKind.LOCAL: BackendGroup.SELF_HOSTED,
        BackendKind.REMOTE: BackendGroup.SELF_HOSTED,
        BackendKind.CLOUD_MANAGED: BackendGroup.EXTERNAL,
        BackendKind.API_PROVIDER: BackendGroup.EXTERNAL,
    }
)
"""The group of every backend kind."""


def backend_group(candidate: CandidateInput) -> BackendGroup:
    """Self-hosted for ``local`` and ``remote`` capacity, external for ``cloud_managed`` and
    ``api_provider``."""
    return BACKEND_GROUP[candidate.backend_kind]


TIER_ORDER: tuple[LocalityTier, ...] = (
    LocalityTier.SAME_SITE,
    LocalityTier.SAME_ZONE,
    LocalityTier.SAME_REGION,
    LocalityTier.CROSS_REGION,
    LocalityTier.UNKNOWN,
)
"""Nearest first; a candidate whose nearness cannot be shown comes after every other."""


def locality_tier(candidate: CandidateInput, consumer: ConsumingSite) -> LocalityTier:
    """How near ``candidate`` is to ``consumer``.

    Capacity tied to no site is Unknown, so it comes after every site of the mesh within its
    :class:`BackendGroup` (the group is compared before the tier: a third-party API placed
    at the consuming site is SameSite and still ranks after self-hosted capacity of the same
    admission state anywhere).
    Otherwise regions decide first: known and different is CrossRegion, unknown on either
    side is Unknown. Within a region, equal known zones are SameZone, anything else
    SameRegion.
    """
    if not candidate.site_bound:
        return LocalityTier.UNKNOWN
    if candidate.site == consumer.name:
        return LocalityTier.SAME_SITE
    geography = candidate.geography
    region, consumer_region = geography.region, consumer.geography.region
    if region is None or consumer_region is None:
        return LocalityTier.UNKNOWN
    if region != consumer_region:
        return LocalityTier.CROSS_REGION
    zone = geography.zone
    if zone is not None and zone == consumer.geography.zone:
        return LocalityTier.SAME_ZONE
    return LocalityTier.SAME_REGION
