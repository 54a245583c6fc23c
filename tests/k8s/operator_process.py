"""``grid operator`` against a real kube-apiserver (tests/k8s/control_plane.py), as a cluster
runs it: README's install block, the operator as a process, and Grid's objects read back.

:func:`run_install` runs README.md's "Install in a cluster" block as written, less building the
image and waiting for the rollout (:data:`SKIPPED_COMMANDS`: there is no kubelet, so no pod
ever runs). :class:`OperatorProcess` runs the operator instead, with the environment the
Deployment gives it and a kubeconfig of the caller's choosing (a ServiceAccount's token, so
that RBAC checks every call). The rest reads what the operator wrote, through the admin's
client: Grid's objects, their statuses and who wrote them, the site's certificate, Events.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from kubernetes import client as k8s

from .control_plane import REPO, ControlPlane, free_tcp_port
from .operator_support import condition, free_udp_port

GROUP, VERSION = "grid.praxis-proxy.io", "v1alpha1"
PLURALS = ("gridnetworks", "gridsites", "inferenceproviders")
OPERATOR_NAMESPACE = "grid-example"  # deploy/overlays/example
ACCOUNT = "grid-operator"
MESH_NAMESPACE = "grid-system"  # where examples/mesh keeps its Secrets and gateways
NETWORK = "glb-demo"
SITE = "east-edge"  # README's site, the one the installed operator serves
EDGE_OVERLAY = "glb-demo-edge-gateway-grid-config"

WAIT_S = 90.0
"""Generous: a passing wait returns as soon as its condition holds, and the operator writes
a status whose only change is a probe time at most every 10 s (its production timing)."""
PERIODS = {"GRID_SECRET_REFRESH_SECONDS": "1", "GRID_PROBE_INTERVAL_SECONDS": "1"}
"""The Deployment's settings for the operator's periods, set short: what the tests change
in a Secret (a renewed certificate) or in a Service's or Gateway's status (a load
balancer's address) is taken within a second instead of the default 30 and 10 s, the
same way, through the same settings a cluster would set."""
POLL_S = 0.25
LOG_TAIL_CHARACTERS = 4000
# Lines of the install block that need what this machine lacks: an image registry and a
# kubelet to run the pod.
SKIPPED_COMMANDS = ("podman ", "kubectl -n grid-example rollout status")

T = TypeVar("T")
JsonObject = dict[str, Any]


# -- README's install block --------------------------------------------------------------------


def doc_block(path: Path, heading: str) -> str:
    """The first ``sh`` block after ``heading`` in ``path``."""
    section = path.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("\n```", 1)[0]


def readme_install_script() -> str:
    """The shell block of README's "Install in a cluster", without :data:`SKIPPED_COMMANDS`."""
    block = doc_block(REPO / "README.md", "## Install in a cluster")
    lines = block.splitlines()
    kept = [line for line in lines if not line.startswith(SKIPPED_COMMANDS)]
    # Two podman lines and the rollout: anything else dropped means README changed shape.
    assert len(lines) - len(kept) == 3, f"unexpected install block:\n{block}"
    return "\n".join(kept) + "\n"


def run_shell(script: str, kubeconfig: Path, control_plane: ControlPlane) -> str:
    """Run documented commands as the admin ``kubeconfig`` names; their output (no Secret in
    it: ``grid secrets`` writes them into a pipe only)."""
    environment = {
        **os.environ,
        # The kubectl built with the server, and this interpreter's `grid`.
        "PATH": f"{control_plane.programs}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig),
        "KUBECACHEDIR": str(control_plane.work_dir / "kubectl-cache"),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"documented commands failed ({done.returncode}):\n{output}"
    return output


def run_install(control_plane: ControlPlane) -> str:
    """README's install block, run as the cluster's admin."""
    assert shutil.which("openssl"), "README's install block pins the certificate with openssl"
    return run_shell(readme_install_script(), control_plane.admin_kubeconfig, control_plane)


# -- the operator as a process -------------------------------------------------------------------


class OperatorProcess:
    """``grid operator`` with the Deployment's environment and ``kubeconfig``'s identity, its
    log in a file. Waits fail at once, with the log's tail, when the operator has exited."""

    def __init__(
        self, kubeconfig: Path, log: Path, *, site: str, namespace: str, swim_port: int
    ) -> None:
        self.log = log
        self.swim_port = swim_port
        self.health_port = free_tcp_port()
        self.metrics_port = free_tcp_port()
        # In a pod, in-cluster credentials would win over KUBECONFIG: keep this machine's own
        # (if it runs in a cluster) away from the operator.
        environment = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        environment.update(
            KUBECONFIG=str(kubeconfig),
            GRID_SWIM_ADVERTISE_ADDRESS="127.0.0.1",
            GRID_SWIM_PORT=str(self.swim_port),
            GRID_METRICS_PORT=str(self.metrics_port),
            GRID_HEALTH_PORT=str(self.health_port),
            POD_NAMESPACE=namespace,
            POD_NAME=f"grid-operator-{site}",
            GRID_SITE_NAME=site,
            **PERIODS,
        )
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "grid.cli", "operator"],
                stdout=output,
                stderr=subprocess.STDOUT,
                env=environment,
            )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def until(self, what: str, check: Callable[[], T | None], timeout: float = WAIT_S) -> T:
        """Poll ``check`` until it returns a truthy value (an exception, such as a 404, means
        not yet) and return it."""
        deadline = time.monotonic() + timeout
        last = "no attempt"
        while True:
            if self.process.poll() is not None:
                raise AssertionError(
                    f"{what}: the operator exited with status {self.process.returncode}\n"
                    f"{self.log_text()[-LOG_TAIL_CHARACTERS:]}"
                )
            try:
                result = check()
            except (k8s.ApiException, AssertionError, KeyError, OSError) as error:
                last = f"{type(error).__name__}: {_first_line(error)}"
            else:
                if result:
                    return result
                last = f"{result!r}"
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {timeout:g} s (last: {last})\n"
                    f"{self.log_text()[-LOG_TAIL_CHARACTERS:]}"
                )
            time.sleep(POLL_S)

    def healthy(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (every network leaves its mesh) and the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def _first_line(error: BaseException) -> str:
    """An error's first line: an ApiException's string goes on with the response's headers
    and body, which have no place in a test's message."""
    if isinstance(error, k8s.ApiException):
        return f"{error.status} {error.reason}"
    return str(error).splitlines()[0] if str(error) else ""


def assert_clean_log(operator: OperatorProcess) -> None:
    """No call the operator made was refused, no Event it posted was rejected."""
    log = operator.log_text()
    for refusal in ("Forbidden", " 403", "Failed to post an event"):
        assert refusal not in log, f"{refusal!r} in the log:\n{log[-LOG_TAIL_CHARACTERS:]}"


def start_installed_operator(
    control_plane: ControlPlane, folder: Path
) -> tuple[OperatorProcess, str]:
    """The installed operator of README's site, started as a process with a kubeconfig that
    holds only a TokenRequest token of its ServiceAccount; returns it and the token. Its
    network moves to a free SWIM port first: examples/mesh asks for UDP 7946, which a pod
    has to itself and this machine may not."""
    swim_port = free_udp_port()
    control_plane.kubectl(
        "patch", "gridnetwork", NETWORK, "--type", "merge",
        "-p", json.dumps({"spec": {"swim": {"port": swim_port}}}),
    )  # fmt: skip
    token = control_plane.service_account_token(OPERATOR_NAMESPACE, ACCOUNT)
    kubeconfig = control_plane.write_kubeconfig(folder / "operator.kubeconfig", token, ACCOUNT)
    operator = OperatorProcess(
        kubeconfig,
        folder / "operator.log",
        site=SITE,
        namespace=OPERATOR_NAMESPACE,
        swim_port=swim_port,
    )
    return operator, token


# -- reading the cluster -----------------------------------------------------------------------


def grid_object(api: k8s.ApiClient, plural: str, name: str) -> JsonObject:
    found = k8s.CustomObjectsApi(api).get_cluster_custom_object(GROUP, VERSION, plural, name)
    assert isinstance(found, dict)
    return found


def gone(call: Callable[[], object]) -> bool:
    """Whether ``call`` is answered 404."""
    try:
        call()
    except k8s.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def reconciled(api: k8s.ApiClient, plural: str, name: str, *conditions: str) -> JsonObject:
    """The object once its status has a phase and ``conditions``, for the generation the
    object is at; raises (not yet) before that."""
    found = grid_object(api, plural, name)
    status = found.get("status") or {}
    assert status.get("phase"), f"{plural}/{name} has no phase yet"
    for type_ in conditions:
        condition(status, type_)
    generation = found["metadata"]["generation"]
    assert status.get("observedGeneration") == generation, f"{plural}/{name} at {generation}"
    return found


def status_managers(found: JsonObject) -> set[str]:
    """Who wrote the object's status through the ``/status`` subresource, as the API
    server recorded it (kmock records nothing of the kind)."""
    return {
        entry["manager"]
        for entry in found["metadata"].get("managedFields") or []
        if entry.get("subresource") == "status"
    }


def site_certificate_fingerprint(api: k8s.ApiClient) -> str:
    secret = k8s.CoreV1Api(api).read_namespaced_secret("glb-demo-site-tls", MESH_NAMESPACE)
    data = secret.data or {}
    certificate = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    return certificate.fingerprint(hashes.SHA256()).hex()


def grid_events(api: k8s.ApiClient) -> list[k8s.CoreV1Event]:
    """Events about Grid's resources (cluster-scoped: posted in the operator's namespace)."""
    events = k8s.CoreV1Api(api).list_namespaced_event(OPERATOR_NAMESPACE)
    return [
        event for event in events.items if event.involved_object.api_version == f"{GROUP}/{VERSION}"
    ]
