"""A real Kubernetes control plane for tests: etcd and kube-apiserver on 127.0.0.1.

Where kmock emulates the API, this is the API server a cluster runs, built from Go modules by
``scripts/control-plane`` (kube-apiserver and kubectl from ``k8s.io/kubernetes``, etcd from
``go.etcd.io/etcd``): schemas, pruning, defaulting, the status subresource, finalizers,
RBAC and admission are the real ones. There is no controller manager and no kubelet:
namespaces are never deleted, nothing is garbage-collected, no pod ever runs.

The admin is a static token in group ``system:masters``; any other identity is a bearer
token (a ServiceAccount's, from the TokenRequest API) in a kubeconfig of its own, so that
a program run with it has exactly the permissions RBAC gives that account.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client as k8s

from grid.demo.mesh import free_port

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "control-plane"
PROGRAMS = ("etcd", "kube-apiserver", "kubectl", "helm")

START_TIMEOUT_S = 240.0
"""real-cluster.md allows about a minute for /readyz on two cores; a loaded machine takes
longer, and a passing start returns as soon as the server is ready."""
STOP_TIMEOUT_S = 15.0
POLL_S = 0.2
LOG_TAIL_CHARACTERS = 3000
KUBECTL_TIMEOUT_S = 120.0

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "grid-test-admin"
DEFAULT_NAME = "grid-test"


class ControlPlaneUnavailable(RuntimeError):
    """The control plane's programs are not built here; the message says how to build them."""


class ControlPlaneError(RuntimeError):
    """A program of the control plane exited or did not become ready; the message holds the
    tail of its log."""


def build_folder() -> Path:
    """The folder ``scripts/control-plane`` builds into, for the versions it pins. Read from
    the script rather than by running it, which would start a build when something is
    missing."""
    text = SCRIPT.read_text(encoding="utf-8")
    versions = {}
    for name in ("KUBERNETES", "ETCD", "HELM"):
        found = re.search(rf"^{name}=(\S+)$", text, re.MULTILINE)
        if found is None:
            raise ControlPlaneUnavailable(f"{SCRIPT} pins no {name} version")
        versions[name] = found.group(1)
    cache = Path(os.environ.get("GRID_CLUSTER_DIR") or REPO / ".cluster")
    return cache / (
        f"kubernetes-{versions['KUBERNETES']}-etcd-{versions['ETCD']}-helm-{versions['HELM']}"
    )


@functools.cache
def programs_folder() -> Path:
    """The ``bin`` folder holding etcd, kube-apiserver and kubectl. A missing build is made
    by ``scripts/control-plane`` under ``CI=true`` only (it takes many minutes: ``.ci/run``
    makes it before the tests); elsewhere :class:`ControlPlaneUnavailable` says to run it."""
    folder = build_folder() / "bin"
    missing = [name for name in PROGRAMS if not os.access(folder / name, os.X_OK)]
    if not missing:
        return folder
    if os.environ.get("CI", "").lower() != "true":
        raise ControlPlaneUnavailable(
            f"{', '.join(missing)} not built in {folder}: run scripts/control-plane"
        )
    done = subprocess.run(
        [str(SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise ControlPlaneUnavailable(
            f"scripts/control-plane failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return Path(done.stdout.strip().splitlines()[-1]) / "bin"


def gateway_api_crds() -> list[Path]:
    """The Gateway API's GatewayClass and Gateway CRDs ``scripts/control-plane`` put beside
    the programs (for the egress discovery tests)."""
    text = SCRIPT.read_text(encoding="utf-8")
    found = re.search(r"^GATEWAY_API=(\S+)$", text, re.MULTILINE)
    if found is None:
        raise ControlPlaneUnavailable(f"{SCRIPT} pins no GATEWAY_API version")
    programs_folder()
    folder = build_folder() / "crds" / f"gateway-api-{found.group(1)}"
    crds = [folder / "gatewayclasses.yaml", folder / "gateways.yaml"]
    missing = [str(crd) for crd in crds if not crd.is_file()]
    if missing:
        raise ControlPlaneUnavailable(f"{', '.join(missing)} missing: run scripts/control-plane")
    return crds


free_tcp_port = functools.partial(free_port, socket.SOCK_STREAM)
"""A loopback TCP port for a listener of the control plane or a test
(``grid.demo.mesh.free_port``)."""


class _Program:
    """One program of the control plane, its output in a log file (an unread pipe that
    fills up would stall it)."""

    def __init__(self, name: str, argv: Sequence[str], log: Path) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                list(argv), stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-LOG_TAIL_CHARACTERS:]
        except OSError:
            return "(no log)"

    def check_running(self, what: str) -> None:
        if self.process.poll() is not None:
            raise ControlPlaneError(
                f"{what}: {self.name} exited with status {self.process.returncode} "
                f"(log {self.log}):\n{self.log_tail()}"
            )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within :data:`STOP_TIMEOUT_S`."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_S)


class ControlPlane:
    """etcd and kube-apiserver on 127.0.0.1, their files and logs in ``work_dir`` (etcd's
    data on tmpfs when there is one). Use as a context manager: entering starts both and
    waits until the API server is ready, leaving stops them."""

    def __init__(self, programs: Path, work_dir: Path, name: str = DEFAULT_NAME) -> None:
        self.name = name
        """The cluster's name in kubeconfigs (``--context NAME`` where several are merged)."""
        self.programs = programs
        self.work_dir = work_dir
        self.certs = work_dir / "certs"
        self.port = free_tcp_port()
        self.admin_token = secrets.token_urlsafe(32)
        self.admin_kubeconfig = work_dir / "admin.kubeconfig"
        self.started_in_s: float | None = None
        """Seconds from starting etcd to the API server's ``/readyz`` answering 200."""
        self._etcd_data: Path | None = None
        self._running: list[_Program] = []
        self._admin: k8s.ApiClient | None = None

    def api_server_arguments(self) -> list[str]:
        """kube-apiserver's flags beyond those every test cluster has (none here; a subclass
        adds its own, with any file they name written in ``work_dir``)."""
        return []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The serving certificate kube-apiserver made for itself in ``--cert-dir``, with
        the CA that signed it: what clients trust."""
        return self.certs / "apiserver.crt"

    # -- starting and stopping ---------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        began = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.certs.mkdir(exist_ok=True)
        etcd_url = self._start_etcd()
        self._start_api_server(etcd_url)
        self.write_kubeconfig(self.admin_kubeconfig, self.admin_token, ADMIN_USER)
        self.started_in_s = time.monotonic() - began

    def stop(self) -> None:
        """Stops the API server, then etcd; removes etcd's data. Safe to call again."""
        if self._admin is not None:
            self._admin.close()  # type: ignore[no-untyped-call]
            self._admin = None
        while self._running:
            self._running.pop().stop()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None

    def _start_etcd(self) -> str:
        # tmpfs and no fsync: the data lives as long as the test session, and a disk flush
        # per write would make every API call wait on the disk.
        shm = Path("/dev/shm")
        parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.work_dir
        self._etcd_data = Path(tempfile.mkdtemp(prefix="grid-etcd-", dir=parent))
        client_url = f"http://127.0.0.1:{free_tcp_port()}"
        peer_url = f"http://127.0.0.1:{free_tcp_port()}"
        etcd = self._launch(
            "etcd",
            [
                "--name=grid-test",
                f"--data-dir={self._etcd_data}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=grid-test={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client_url}/health", timeout=5) as answer:
                    return bool(json.load(answer).get("health") == "true")
            except (OSError, ValueError):
                return False

        self._wait(etcd, "etcd answers /health", healthy)
        return client_url

    def _start_api_server(self, etcd_url: str) -> None:
        signing_key = self.work_dir / "service-account.key"
        public_key = self.work_dir / "service-account.pub"
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_private(
            signing_key,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        public_key.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        tokens = self.work_dir / "tokens.csv"
        _write_private(
            tokens, f'{self.admin_token},{ADMIN_USER},{uuid.uuid4()},"system:masters"\n'.encode()
        )
        server = self._launch(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                f"--cert-dir={self.certs}",
                f"--secure-port={self.port}",
                "--bind-address=127.0.0.1",
                # Without these it takes the default route's address and keeps the
                # `kubernetes` Service's endpoints pointing there.
                "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=RBAC",
                # The issuer and keys enable the TokenRequest API (ServiceAccount tokens).
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={public_key}",
                f"--service-account-signing-key-file={signing_key}",
                f"--token-auth-file={tokens}",
                *self.api_server_arguments(),
            ],
        )
        last_answer = ["no answer yet"]

        def ready() -> bool:
            if not self.ca_file.exists():
                return False
            request = urllib.request.Request(
                f"{self.url}/readyz", headers={"Authorization": f"Bearer {self.admin_token}"}
            )
            context = ssl.create_default_context(cafile=str(self.ca_file))
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as answer:
                    return bool(answer.status == 200)
            except urllib.error.HTTPError as error:
                # 500 lists the checks that do not pass yet: worth showing on a timeout.
                last_answer[0] = f"{error.code}: {error.read().decode(errors='replace')}"
            except (OSError, ssl.SSLError) as error:
                last_answer[0] = repr(error)
            return False

        self._wait(server, "kube-apiserver answers /readyz", ready, last_answer)

    def _launch(self, program: str, arguments: list[str]) -> _Program:
        started = _Program(
            program, [str(self.programs / program), *arguments], self.work_dir / f"{program}.log"
        )
        self._running.append(started)
        return started

    def _wait(
        self,
        program: _Program,
        what: str,
        condition: Callable[[], bool],
        last_answer: list[str] | None = None,
    ) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not condition():
            program.check_running(what)
            if time.monotonic() > deadline:
                answer = f"; last answer: {last_answer[0][-1500:]}" if last_answer else ""
                raise ControlPlaneError(
                    f"{what}: not within {START_TIMEOUT_S:g} s{answer}\n"
                    f"{program.name} log ({program.log}):\n{program.log_tail()}"
                )
            time.sleep(POLL_S)

    # -- clients ---------------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, token: str, user: str) -> Path:
        """A kubeconfig for this server holding one bearer token (context ``user``)."""
        return write_kubeconfig(path, {user: (self, token)}, current=user)

    @property
    def admin(self) -> k8s.ApiClient:
        """An official client as the admin, for as long as the control plane runs."""
        if self._admin is None:
            self._admin = self.api_client()
        return self._admin

    def api_client(self, token: str | None = None) -> k8s.ApiClient:
        """An official client authenticated by ``token`` (default: the admin's)."""
        configuration = k8s.Configuration(
            host=self.url,
            api_key={"authorization": token or self.admin_token},
            api_key_prefix={"authorization": "Bearer"},
            ssl_ca_cert=str(self.ca_file),
        )
        return k8s.ApiClient(configuration)

    def kubectl(
        self,
        *arguments: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """The built kubectl, as the admin unless ``kubeconfig`` says otherwise. With
        ``check``, a non-zero exit fails with kubectl's standard error (never its input,
        which may hold Secrets)."""
        environment = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or self.admin_kubeconfig),
            # Discovery cache in the work dir, not in the user's ~/.kube.
            "KUBECACHEDIR": str(self.work_dir / "kubectl-cache"),
        }
        done = subprocess.run(
            [str(self.programs / "kubectl"), *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            env=environment,
            cwd=REPO,
            timeout=KUBECTL_TIMEOUT_S,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(arguments)} failed ({done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )
        return done

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A token for ServiceAccount ``namespace/name`` from the TokenRequest API (what
        ``kubectl create token`` asks for; the kubelet asks the same for a pod)."""
        # No audiences: the server fills in its own, which its authenticator accepts.
        request = k8s.AuthenticationV1TokenRequest(
            spec=k8s.V1TokenRequestSpec(expiration_seconds=seconds)
        )
        answer = k8s.CoreV1Api(self.admin).create_namespaced_service_account_token(
            name, namespace, request
        )
        token = answer.status.token if answer.status is not None else None
        if not isinstance(token, str) or not token:
            raise ControlPlaneError(f"the TokenRequest for {namespace}/{name} gave no token")
        return token

    def create_namespace(self, name: str) -> None:
        namespace = k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name))
        k8s.CoreV1Api(self.admin).create_namespace(namespace)


def write_kubeconfig(
    path: Path, contexts: Mapping[str, tuple[ControlPlane, str]], *, current: str
) -> Path:
    """A kubeconfig with one context per entry (its server and bearer token, cluster and
    user named as the context), readable by its owner only: it holds credentials."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": plane.url,
                    "certificate-authority-data": base64.b64encode(
                        plane.ca_file.read_bytes()
                    ).decode(),
                },
            }
            for name, (plane, _) in contexts.items()
        ],
        "users": [
            {"name": name, "user": {"token": token}} for name, (_, token) in contexts.items()
        ],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name}} for name in contexts
        ],
        "current-context": current,
    }
    _write_private(path, yaml.safe_dump(config).encode())
    return path


def _write_private(path: Path, content: bytes) -> None:
    """Write a credential: created readable by its owner only, never world-readable first."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(content)
