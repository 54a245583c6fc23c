"""Locality tiers: how near a candidate's site is to the consuming site."""

from __future__ import annotations

from grid.models.common import LocalityTier
from grid.scoring.inputs import CandidateInput, ConsumingSite

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

    Capacity tied to no site is Unknown, so it comes after every site of the mesh: the
    fallback the spec's preference ladder asks for. Otherwise regions decide first: known
    and different is CrossRegion, unknown on either side is Unknown. Within a region, equal
    known zones are SameZone, anything else SameRegion.
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
