"""The real API server refuses at ``kubectl apply`` exactly what ``SpecValid`` refuses.

The generated CRDs are applied to a real kube-apiserver (the session's ``control_plane``),
which must take them (their CEL rules compile, and their estimated cost is within the
server's limits). Every case of ``test_crd_validation_rules.py`` (the model tests' cases
and a case on each side of every rule) is then created on the server, in a server-side dry
run with strict field validation, as ``kubectl apply`` sends it: the server must accept what
the models accept and refuse what they refuse. A refusal names each field the models find
wrong; where the models' message is a rule's, the server says it word for word, and a case
made for one rule is refused with that rule's message.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from grid.models.crd import RESOURCES, all_crds, dump_all_crds
from grid.models.meta import GROUP, VERSION
from grid.models.network import SUSPICION_OUTLASTS_PROBE
from grid.models.validation_rules import VALIDATIONS
from k8s.control_plane import ControlPlane
from k8s.waiting import eventually
from test_crd_validation_rules import CASES, Case, nodes_with_rules, previous_release_crds
from test_crd_validation_rules_cases import network, spec_problems

PLURALS = {names.kind: names.plural for _, names, _ in RESOURCES}

# Cases the API server accepts though the models refuse them, each with why. Only a check
# that needs more than one object may be missing at admission; every check of one object
# that a CRD can express is there. (Empty: no check of the models needs another object.)
ACCEPTED_BY_THE_SERVER_ONLY: dict[str, str] = {}

# Cases whose text the models refuse but the API server reads as an object the models
# accept, and stores that: what Grid reads back is valid.
READ_AS_VALID: dict[str, str] = {
    "test_validation_is_as_strict_as_the_api_server[1]": "the server reads the whole number "
    "7946.0 as the integer 7946 (its JSON decoding makes no difference) and stores 7946; "
    "no schema keyword or rule sees how a number was written",
}

# The fixed messages of the rules on each node, by kind and path: where the models refuse
# a field with one of them, the server must refuse it with the same words (messages made
# by an expression are checked by the cases of their rules).
RULE_MESSAGES: dict[tuple[str, str], set[str]] = {}
for kind, path, node in nodes_with_rules():
    RULE_MESSAGES[kind, path] = {
        rule["message"] for rule in node[VALIDATIONS] if "messageExpression" not in rule
    }


def node_path(path: str) -> str:
    """The schema path of a field path: ``spec.seeds[0]`` is ``.spec.seeds[*]``."""
    return "." + re.sub(r"\[[0-9]+\]", "[*]", path)


@dataclass(frozen=True)
class Refusal:
    """One reason the server gave: the field (empty when it names none) and the message."""

    field: str
    message: str

    def names(self, path: str) -> bool:
        """Whether this reason is about the field at ``path`` or one below it."""
        if self.field:
            return self.field == path or self.field.startswith((f"{path}.", f"{path}["))
        return path in self.message


@pytest.fixture(scope="module")
def grid_api(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    """The session's API server with the generated CRDs applied and established."""
    control_plane.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=dump_all_crds()
    )
    names = [f"crd/{crd['metadata']['name']}" for crd in all_crds()]
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=120s", *names)
    with control_plane.api_client() as api:
        yield api


@dataclass(frozen=True)
class Admission:
    """The server's answer to a create: the object it would store, or why it refuses."""

    stored: dict[str, Any] | None
    refusals: list[Refusal]


def admit(api: k8s.ApiClient, document: dict[str, Any]) -> Admission:
    """What the server makes of creating ``document``, asked in a dry run: nothing is
    stored."""
    try:
        stored = k8s.CustomObjectsApi(api).create_cluster_custom_object(
            GROUP,
            VERSION,
            PLURALS[document["kind"]],
            document,
            dry_run="All",
            field_validation="Strict",
        )
    except ApiException as error:
        if error.status not in (400, 422):
            raise
        status = json.loads(error.body)
        causes = (status.get("details") or {}).get("causes") or []
        found = [Refusal(cause.get("field", ""), cause.get("message", "")) for cause in causes]
        return Admission(None, found or [Refusal("", status.get("message", ""))])
    return Admission(stored, [])


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_api_server_accepts_exactly_what_the_models_accept(
    grid_api: k8s.ApiClient, case: Case
) -> None:
    problems = spec_problems(case.document)
    admission = admit(grid_api, case.document)
    found = admission.refusals
    if not problems:
        assert found == [], "the API server refuses what the models accept"
        return
    if admission.stored is not None:
        if case.id in READ_AS_VALID:
            assert spec_problems(admission.stored) == []
            return
        assert case.id in ACCEPTED_BY_THE_SERVER_ONLY, (
            f"the API server accepts what the models refuse: {problems}"
        )
        return
    for path, reason in problems:
        assert any(refusal.names(path) for refusal in found), (path, found)
        if reason in RULE_MESSAGES.get((case.document["kind"], node_path(path)), ()):
            assert any(reason in refusal.message for refusal in found), (reason, found)
    if case.refusal:
        assert any(case.refusal in refusal.message for refusal in found), found


def test_the_exceptions_are_cases() -> None:
    assert {*ACCEPTED_BY_THE_SERVER_ONLY, *READ_AS_VALID} <= {case.id for case in CASES}


def network_crd(crds: list[dict[str, Any]]) -> dict[str, Any]:
    return next(crd for crd in crds if crd["spec"]["names"]["kind"] == "GridNetwork")


async def test_an_object_stored_before_its_rule_is_updated_where_it_stays_as_it_was(
    control_plane: ControlPlane, grid_api: k8s.ApiClient
) -> None:
    """What the review of the new rules relies on (:mod:`grid.models.crd_review`): the API
    server ratchets validation, so an object the previous release's CRD stored, and a new
    rule refuses, can still be updated where the update leaves the refused field alone."""
    previous = network_crd(previous_release_crds())
    objects = k8s.CustomObjectsApi(grid_api)
    name = "stored-before-the-rules"
    swim_too_eager = {"probeInterval": "20s", "suspicionTimeout": "10s"}
    document = network(swim=swim_too_eager)
    document["metadata"]["name"] = name

    def apply(crd: dict[str, Any]) -> None:
        control_plane.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump(crd)
        )

    def patch(spec: dict[str, Any]) -> Admission:
        try:
            objects.patch_cluster_custom_object(
                GROUP, VERSION, "gridnetworks", name, {"spec": spec}
            )
        except ApiException as error:
            return Admission(None, [Refusal("", json.loads(error.body)["message"])])
        return Admission({}, [])

    apply(previous)
    try:
        await eventually(
            lambda: objects.create_cluster_custom_object(GROUP, VERSION, "gridnetworks", document),
            what="the previous release's CRD stores a network its rules would refuse",
        )
        apply(network_crd(all_crds()))
        await eventually(
            lambda: admit(grid_api, network(swim=swim_too_eager)).refusals,
            what="the current CRD's rules in force",
        )
        assert patch({"region": "us-east"}).refusals == []
        (refusal,) = patch({"swim": {"probeInterval": "30s"}}).refusals
        assert SUSPICION_OUTLASTS_PROBE.message in refusal.message
        assert patch({"swim": {"probeInterval": "5s"}}).refusals == []
    finally:
        with contextlib.suppress(ApiException):
            objects.delete_cluster_custom_object(GROUP, VERSION, "gridnetworks", name)
        apply(network_crd(all_crds()))
