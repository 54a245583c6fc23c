"""The review of the CRDs' narrowings since the previous release (``compat/previous.txt``).

:mod:`grid.models.evolution` lists every change of the CRDs that could refuse an object the
previous release stored: a new validation rule needs review, a new ``maxLength`` or
``pattern`` is not additive. The changes recorded here were reviewed, and the comparison
no longer lists them (``grid crds --compare-with``, ``tests/test_crd_evolution.py``):

* Each refuses only what ``SpecValid`` of the previous release already refused: every rule
  is the twin of a check of the models or of a CRD pattern as ``SpecValid`` reads it
  (:mod:`grid.models.validation_rules`), and each bound is the models' own (a label value of
  at most 63 characters matching ``LABEL_VALUE_PATTERN``). Those checks are unchanged since
  0.2.0, so an object they refuse was never valid there either: it was stored, but
  ``SpecValid`` was False and it never served. No object 0.2.0 accepted as valid is
  refused.
  ``tests/test_crd_validation_rules_server.py`` holds the API server to that on the real
  server: it accepts exactly what the models accept, case by case.
* An object stored before and refused now is still readable, and can still be updated where
  the update leaves the refused field as it is: Kubernetes ratchets validation on updates
  (CRDValidationRatcheting, on by default since 1.30 and in the 1.36 the tests run),
  applying schema keywords and rules without ``oldSelf`` only to the fields an update
  changes; ``tests/test_crd_validation_rules_server.py`` shows it on a network stored
  under 0.2.0's CRD. Fixing the field, or deleting the object, is never refused.

When the previous release moves to one that carries these changes, they are no longer
changes, and ``tests/test_crd_validation_rules.py`` asks for their entries to go.

Pure: data only.
"""

from __future__ import annotations

from dataclasses import dataclass

from grid.models.budgets import ONE_WINDOW
from grid.models.fields import (
    HOST_PORT_IPV6,
    HOST_PORT_NAME_LENGTH,
    NO_WHITESPACE,
    PRICE_RANGE,
    TIMEOUT_WITHIN_INTERVAL,
    within,
)
from grid.models.meta import LABEL_KEY_NAME, LABEL_KEY_PREFIX, LABEL_MAP_KEYS, LABEL_VALUE_PATTERN
from grid.models.network import AFFINITY_NEEDS_A_KEY, SUSPICION_OUTLASTS_PROBE
from grid.models.offers import MODEL_NAME_BYTES
from grid.models.provider import (
    A_SIGNAL_MAPPED,
    CUSTOM_WITH_CUSTOM_ONLY,
    ENDPOINT_IP_NEEDS_SERVER_NAME,
    HEADER_NOT_AUTHORIZATION,
    HEADER_NOT_THE_GATEWAYS,
    HEADER_WITH_HEADER_STRATEGIES,
    HISTOGRAMS_SUM,
    OAUTH2_WITH_OAUTH2_ONLY,
    ONE_HEADER_SOURCE,
    PATH_WITH_PORT,
    PROMETHEUS_LABEL_NAMES,
    SECRET_REF_NEEDED,
    SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
    URL_OR_PORT,
)
from grid.models.selectors import VALUES_FORBIDDEN, VALUES_NEEDED
from grid.models.site import (
    ADDRESS_OR_FROM,
    EGRESS_IP_NEEDS_SERVER_NAME,
    PREVIOUS_PIN_DIFFERS,
    PREVIOUS_PIN_NEEDS_CURRENT,
)
from grid.models.urls import URL_HOST_AND_PORT, URL_IPV6_HOST


@dataclass(frozen=True, slots=True)
class Review:
    """Changes reviewed against the previous release ``release``: validation rules by their
    CEL text (wherever they sit: a rule goes with the type or model of its twin check), and
    other narrowings as the comparison reports them, ``(crd, path, detail)``."""

    release: str
    rules: frozenset[str]
    narrowings: frozenset[tuple[str, str, str]]


_PROVIDERS = "inferenceproviders.grid.praxis-proxy.io"
_LABEL_VALUES = ".matchExpressions[*].values[*]"

REVIEWED: Review = Review(
    release="0.2.0",
    rules=frozenset(
        rule.rule
        for rule in (
            # GridNetwork
            SUSPICION_OUTLASTS_PROBE,
            AFFINITY_NEEDS_A_KEY,
            HOST_PORT_IPV6,
            HOST_PORT_NAME_LENGTH,
            NO_WHITESPACE,
            within(0.1, 300).rule,
            within(0.1, 3600).rule,
            within(60, 366 * 86400).rule,
            within(0, 10).rule,
            within(1, 3600).rule,
            # ONE_WINDOW: 0.2.0's CRD required window and dropped the unknown fields
            # calendar and rolling, so every stored budget has exactly one window
            ONE_WINDOW,
            # GridSite (ADDRESS_OR_FROM refuses an egress without an address: 0.2.0's CRD
            # required one, and dropped the unknown field from, so every stored egress has
            # an address and no from)
            ADDRESS_OR_FROM,
            EGRESS_IP_NEEDS_SERVER_NAME,
            PREVIOUS_PIN_NEEDS_CURRENT,
            PREVIOUS_PIN_DIFFERS,
            # InferenceProvider
            ENDPOINT_IP_NEEDS_SERVER_NAME,
            URL_HOST_AND_PORT,
            URL_IPV6_HOST,
            MODEL_NAME_BYTES,
            PRICE_RANGE,
            TIMEOUT_WITHIN_INTERVAL,
            SECRET_REF_NEEDED,
            HEADER_WITH_HEADER_STRATEGIES,
            # oauth2 is new: 0.2.0 dropped it as an unknown field, so no stored object has it
            OAUTH2_WITH_OAUTH2_ONLY,
            # serviceAccount is new too: no object 0.2.0 stored has it
            SERVICE_ACCOUNT_WITH_SERVICE_ACCOUNT_ONLY,
            # and so is custom (both rules hold of any object without it)
            CUSTOM_WITH_CUSTOM_ONLY,
            ONE_HEADER_SOURCE,
            HEADER_NOT_AUTHORIZATION,
            HEADER_NOT_THE_GATEWAYS,
            URL_OR_PORT,
            PATH_WITH_PORT,
            A_SIGNAL_MAPPED,
            HISTOGRAMS_SUM,
            PROMETHEUS_LABEL_NAMES,
            VALUES_NEEDED,
            VALUES_FORBIDDEN,
            LABEL_KEY_PREFIX,
            LABEL_KEY_NAME,
            *LABEL_MAP_KEYS,
        )
    ),
    narrowings=frozenset(
        (_PROVIDERS, f"{selector}{_LABEL_VALUES}", detail)
        for selector in (".spec.siteSelector", ".spec.accessPolicy.siteSelector")
        for detail in ("maxLength added (63)", f"pattern added: {LABEL_VALUE_PATTERN}")
    ),
)
"""What the CRDs of this release narrow since 0.2.0, reviewed as above."""
