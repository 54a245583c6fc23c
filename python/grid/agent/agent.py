"""The standalone agent: Grid for one site without Kubernetes.

It reads the site's resources from a directory (reloading them when files change), runs a
SWIM node and a site engine per GridNetwork, observes this site's providers, probes every
site's egress, and writes each gateway's overlay and each resource's status under the state
directory. ``/metrics``, ``/healthz`` and ``/status`` are served over HTTP when asked.

The directory is scanned and read in a worker thread, never on the event loop, so that
SWIM, the HTTP endpoints and signals are served while a large or hostile directory is
read; the read stops at the limits of :mod:`grid.models.limits`, after
``LOAD_TIME_LIMIT_S`` and when the agent stops, and a read that does not stop in time
(a file system that does not answer) is abandoned: the thread is a daemon, which nothing
waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import aiohttp

from grid.agent.egress import EgressListener, server_context
from grid.agent.http import StatusServer
from grid.agent.network import (
    NetworkRuntime,
    OverlayListener,
    PublishListener,
    Shared,
)
from grid.agent.options import DEFAULT_BIND_HOST, AgentOptions
from grid.agent.outputs import OutputWriter
from grid.agent.probes import SiteTls
from grid.agent.report import ResourceReport
from grid.engine import SiteEngine
from grid.errors import (
    AgentConfigError,
    ConfigError,
    GridError,
    ResourceError,
    SiteCredentialsError,
)
from grid.membership import SwimCredentials
from grid.models.limits import LOAD_TIME_LIMIT_S, MAX_DIRECTORY_FILES
from grid.models.network import GridNetwork, generate_grid_id
from grid.models.resources import YAML_SUFFIXES, LoadedResources, load_resources_from_dir
from grid.runtime.credentials import swim_credentials
from grid.trust.chain import NetworkCa
from grid.trust.pem import check_public_cert_pem

_log = logging.getLogger("grid.agent")

Signature = tuple[tuple[str, int, int], ...]
T = TypeVar("T")

READ_GRACE_S = 5.0
"""How much longer than ``LOAD_TIME_LIMIT_S`` a read may take before it is abandoned (it
stops by itself at the limit unless a file system call does not return)."""
MAX_LOGGED_PROBLEMS = 20
"""Invalid resources logged one line each per read; the rest are counted."""


class NameConflictError(GridError):
    """Another live node, started earlier, holds this site's name in a network: this
    agent's node gave way and the agent stopped."""


class Agent:
    """One site's Grid. ``await start()``, then ``await stop()`` (or :meth:`run`, which
    waits for SIGINT or SIGTERM)."""

    def __init__(self, options: AgentOptions) -> None:
        self.options = options
        self.site = ""
        self.networks: dict[str, NetworkRuntime] = {}
        self.report = ResourceReport()
        self.overlay_listeners: list[OverlayListener] = []
        """Called as ``(network, overlay, path)`` after each overlay file is written."""
        self.publish_listeners: list[PublishListener] = []
        """Called as ``(network, item)`` after each item is handed to SWIM."""
        self._resources: LoadedResources | None = None
        self._signature: Signature | None = None
        self._shared: Shared | None = None
        self._session: aiohttp.ClientSession | None = None
        self._egress: EgressListener | None = None
        self._http: StatusServer | None = None
        self._reload_task: asyncio.Task[None] | None = None
        self._tls_signature: Signature = ()
        self._reader: threading.Thread | None = None
        self._closing = threading.Event()
        """Set when the agent stops: a read in the worker thread stops at its next check."""
        self._stop_requested = asyncio.Event()
        self._stopped = False
        self.conflict: str | None = None
        """Why the agent stops: a network's node gave way to an older node of this site."""

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the resources and start everything. Raises
        :class:`~grid.errors.AgentConfigError` (or another :class:`~grid.errors.ConfigError`)
        when the options or resources leave nothing to run."""
        options = self.options
        resources = await self._read(initial=True)
        assert resources is not None
        if not resources.networks:
            problems = (
                f" ({_summary(self.report.errors, options.resources)})"
                if self.report.errors
                else ""
            )
            raise AgentConfigError(f"no GridNetwork in {options.resources}{problems}")
        self.site = options.site.default or _pick_site(
            resources, min(n.metadata.name for n in resources.networks), options
        )
        tls = SiteTls.from_dir(options.tls_dir)
        certificate_pem = read_site_certificate(tls)
        credentials = site_swim_credentials(tls, options.tls_dir)
        network_ca = NetworkCa(credentials.trust_anchors)
        self._tls_signature = _files_signature(options.tls_dir)
        try:
            options.state_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise AgentConfigError(
                f"cannot create the state directory {options.state_dir}: {error.strerror}"
            ) from None
        self._session = aiohttp.ClientSession()
        self._shared = Shared(
            writer=OutputWriter(options.state_dir, status_interval_s=options.status_interval_s),
            prober=tls.prober(),
            session=self._session,
            secrets_dir=options.secrets_dir,
            tick_s=options.tick_s,
            probe_interval_s=options.probe_interval_s,
            push_pull_factor=options.push_pull_factor,
            certificate_pem=certificate_pem,
            swim_credentials=credentials,
            network_ca=network_ca,
            overlay_listeners=self.overlay_listeners,
            publish_listeners=self.publish_listeners,
            on_name_conflict=self._name_conflict,
        )
        try:
            if options.egress_listen is not None:
                if tls.certificate is None or tls.private_key is None:
                    raise AgentConfigError("--egress-listen needs tls.crt and tls.key in --tls-dir")
                context = server_context(tls.certificate, tls.private_key, tls.ca)
                self._egress = EgressListener(options.egress_listen, context)
                await self._egress.start()
                _log.info("%s: egress TLS listener at %s", self.site, self._egress.address)
            if options.http is not None:
                self._http = StatusServer(self, options.http)
                await self._http.start()
                _log.info("%s: HTTP endpoints at http://%s", self.site, self._http.address)
            await self._apply(resources)
            self._check_credentials_taken()
        except BaseException:
            await self.stop(leave=False)
            raise
        self._reload_task = asyncio.create_task(self._reload_loop())
        _log.info("site %s serving %d network(s)", self.site, len(self.networks))

    async def stop(self, *, leave: bool = True) -> None:
        """Stop: with ``leave``, every network leaves its mesh (peers record the site as
        left at once) and the outputs are flushed; without, the site vanishes as if it had
        crashed (peers detect a failure)."""
        if self._stopped:
            return
        self._stopped = True
        self._closing.set()
        self._stop_requested.set()
        if self._reload_task is not None:
            self._reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload_task
        await asyncio.gather(*(n.stop(leave=leave) for n in self.networks.values()))
        for closing in (self._http, self._egress):
            if closing is not None:
                await closing.stop()
        if self._session is not None:
            await self._session.close()
        _log.info("site %s stopped (%s)", self.site, "left the mesh" if leave else "crashed")

    async def run(self) -> None:
        """Start, serve until SIGINT or SIGTERM, then stop gracefully. Raises
        :class:`NameConflictError` once stopped if a network's node gave way to an older
        node of this site."""
        await self.start()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self._stop_requested.set)
        try:
            await self._stop_requested.wait()
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            await self.stop(leave=True)
        if self.conflict is not None:
            raise NameConflictError(self.conflict)

    def request_stop(self) -> None:
        """Ask :meth:`run` to stop gracefully."""
        self._stop_requested.set()

    def _name_conflict(self, network: str, message: str) -> None:
        """A network's node stopped for an older node of this site: this agent is the
        duplicate (a site name given twice) and stops."""
        if self.conflict is None:
            self.conflict = message
        self._stop_requested.set()

    def _check_credentials_taken(self) -> None:
        """At start, credentials a network's SWIM node refuses stop the agent: they do not
        get better by waiting."""
        for name, runtime in sorted(self.networks.items()):
            refused = runtime.swim.credentials_error
            if refused is not None:
                raise AgentConfigError(f"network {name}: {refused}")

    @property
    def events(self) -> list[dict[str, str]]:
        """Recent resource events, newest last."""
        return [] if self._shared is None else self._shared.events

    @property
    def http_address(self) -> str | None:
        return None if self._http is None else self._http.address

    @property
    def egress_address(self) -> str | None:
        return None if self._egress is None else self._egress.address

    # -- resources ------------------------------------------------------------------------

    async def _read(self, *, initial: bool) -> LoadedResources | None:
        """Read the resource directory in a worker thread, if it changed since the last
        read (always when ``initial``), and set :attr:`report`. Returns None when nothing
        changed or a read is still running, else what is to serve: what was read, or the
        last good resources when it cannot be used. At start, a directory that cannot be
        read raises :class:`~grid.errors.AgentConfigError`."""
        if self._reader is not None and self._reader.is_alive():
            return None  # an abandoned read has not stopped yet: no second one beside it
        root = self.options.resources
        previous = None if initial else self._signature
        started = time.monotonic()

        def interrupt() -> str | None:
            if self._closing.is_set():
                return "the agent is stopping"
            if time.monotonic() - started > LOAD_TIME_LIMIT_S:
                return f"reading the directory took more than {LOAD_TIME_LIMIT_S:g} s, the limit"
            return None

        def read() -> tuple[Signature, LoadedResources | ResourceError | None]:
            signature = _scan(root)
            if signature == previous:
                return signature, None
            try:
                return signature, load_resources_from_dir(root, interrupt=interrupt)
            except ConfigError as error:  # the directory itself cannot be read
                return signature, ResourceError(str(error))
            except Exception as error:  # a bug: reported (never the input), never fatal
                reason = f"reading failed: {type(error).__name__}"
                return signature, ResourceError(reason, file=str(root))

        try:
            async with asyncio.timeout(LOAD_TIME_LIMIT_S + READ_GRACE_S):
                signature, loaded = await self._in_worker(read)
        except TimeoutError:
            error = ResourceError(
                f"reading did not finish within {LOAD_TIME_LIMIT_S + READ_GRACE_S:g} s and "
                "was abandoned (a file system that does not answer?)",
                file=str(root),
            )
            if initial:
                raise AgentConfigError(str(error)) from None
            _log.error("%s; the last good resources keep serving", error)
            self.report = ResourceReport((error,), applied=False)
            return self._resources or LoadedResources()
        if loaded is None:
            return None
        self._signature = signature
        if isinstance(loaded, ResourceError):
            if initial:
                raise AgentConfigError(str(loaded))
            _log.error("%s; the last good resources keep serving", loaded)
            self.report = ResourceReport((loaded,), applied=False)
            return self._resources or LoadedResources()
        for problem in loaded.errors[:MAX_LOGGED_PROBLEMS]:
            _log.error("invalid resource: %s", problem)
        if len(loaded.errors) > MAX_LOGGED_PROBLEMS:
            _log.error(
                "invalid resources: %d more not logged (see /status)",
                len(loaded.errors) - MAX_LOGGED_PROBLEMS,
            )
        if loaded.errors and not initial:
            self.report = ResourceReport(loaded.errors, applied=False)
            return self._resources or loaded
        self.report = ResourceReport(loaded.errors, applied=True)
        return loaded

    def _in_worker(self, function: Callable[[], T]) -> asyncio.Future[T]:
        """``function()`` run in a new daemon thread; its outcome is delivered to the
        loop. Cancelling the future abandons the thread, which nothing waits for."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

        def run() -> None:
            result: T | None = None
            error: BaseException | None = None
            try:
                result = function()
            except BaseException as raised:  # delivered to the awaiting task
                error = raised
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        self._reader = threading.Thread(target=run, name="grid-resources", daemon=True)
        self._reader.start()
        return future

    async def _reload_loop(self) -> None:
        while True:
            await asyncio.sleep(self.options.reload_interval_s)
            for runtime in self.networks.values():
                runtime.reload_keys()
            if _files_signature(self.options.tls_dir) != self._tls_signature:
                self._reload_tls()
            resources = await self._read(initial=False)
            if resources is None:
                continue
            if not self.report.applied:
                message = _summary(self.report.errors, self.options.resources)
                for runtime in self.networks.values():
                    runtime.reject(message)
                continue
            _log.info("resources changed; applying")
            try:
                await self._apply(resources)
            except GridError as error:
                _log.error("the new resources cannot be applied: %s", error)

    def _reload_tls(self) -> None:
        """The TLS files changed (a certificate rotation): advertise the new certificate,
        sign SWIM messages, probe and listen with it. Unusable files are reported and the old
        ones kept."""
        self._tls_signature = _files_signature(self.options.tls_dir)
        shared = self._shared
        assert shared is not None
        try:
            tls = SiteTls.from_dir(self.options.tls_dir)
            certificate_pem = read_site_certificate(tls)
            credentials = site_swim_credentials(tls, self.options.tls_dir)
            network_ca = NetworkCa(credentials.trust_anchors)
            prober = tls.prober()
            if self._egress is not None:
                if tls.certificate is None or tls.private_key is None:
                    raise AgentConfigError("the egress listener needs tls.crt and tls.key")
                self._reload_egress(tls.certificate, tls.private_key, credentials)
        except GridError as error:
            _log.error("%s: new TLS files not used, the old ones stay: %s", self.site, error)
            return
        shared.prober, shared.certificate_pem = prober, certificate_pem
        shared.swim_credentials, shared.network_ca = credentials, network_ca
        for runtime in self.networks.values():
            # The certificate is advertised once the node signs with it (next refresh).
            runtime.engine.set_network_ca(network_ca)
            runtime.use_prober(prober)
            runtime.wake()
        _log.info("%s: TLS files reloaded", self.site)

    def _reload_egress(
        self, certificate: Path, private_key: Path, credentials: SwimCredentials
    ) -> None:
        """Present the new certificate at the egress listener, unless the SWIM node would
        refuse it (another site's, not from the CA): the listener then keeps presenting the
        one the node signs with, and the node reports why."""
        assert self._egress is not None
        try:
            credentials.check(self.site)
        except SiteCredentialsError as error:
            _log.error("%s: the egress listener keeps its certificate: %s", self.site, error)
            return
        self._egress.reload(certificate, private_key)

    async def _apply(self, resources: LoadedResources) -> None:
        shared = self._shared
        assert shared is not None
        self._resources = resources
        networks = {n.metadata.name: n for n in resources.networks}
        if not networks:
            raise AgentConfigError(f"no GridNetwork in {self.options.resources}")
        for name in sorted(set(self.networks) - set(networks)):
            _log.info("network %s removed; leaving its mesh", name)
            await self.networks.pop(name).stop(leave=True)
        binds = self._binds(networks.values())
        message = (
            _summary(self.report.errors, self.options.resources) if self.report.errors else None
        )
        for name, network in sorted(networks.items()):
            bind = binds[name]
            advertise = self.options.advertise.get(name)
            sites = [s for s in resources.sites if s.spec.grid_network_ref == name]
            providers = [p for p in resources.providers if p.spec.grid_network_ref == name]
            runtime = self.networks.get(name)
            if runtime is None:
                try:
                    site = _pick_site(resources, name, self.options)
                except AgentConfigError as error:
                    if not self.networks and name == min(networks):
                        raise
                    _log.error("network %s not joined: %s", name, error)
                    continue
                engine = SiteEngine(
                    network,
                    site,
                    sites=sites,
                    providers=providers,
                    grid_id=self._grid_id(network),
                    probe_interval_s=self.options.probe_interval_s,
                )
                runtime = NetworkRuntime(
                    shared,
                    engine,
                    bind=bind,
                    advertise=advertise,
                    key_paths=self.options.key_files_for(name),
                )
                self.networks[name] = runtime
                await runtime.start()
            else:
                runtime.apply(network, sites, providers, bind=bind, advertise=advertise)
            if message is not None:
                runtime.reject(message)

    def _binds(self, networks: Iterable[GridNetwork]) -> dict[str, str]:
        binds = {}
        for network in networks:
            name = network.metadata.name
            given = self.options.bind.get(name)
            binds[name] = given or f"{DEFAULT_BIND_HOST}:{network.spec.swim.port}"
        taken: dict[str, str] = {}
        for name, bind in binds.items():
            if not bind.endswith(":0") and bind in taken:
                raise AgentConfigError(
                    f"networks {taken[bind]!r} and {name!r} would both bind {bind}; "
                    "give each its own --bind NETWORK=HOST:PORT"
                )
            taken[bind] = name
        return binds

    def _grid_id(self, network: GridNetwork) -> str:
        """The spec's grid id, else the one recorded in this site's status from an earlier
        run, else a new one."""
        if network.spec.grid_id:
            return network.spec.grid_id
        status = self.options.state_dir / "status" / "GridNetwork" / f"{network.metadata.name}.json"
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            recorded = json.loads(status.read_text(encoding="utf-8"))["status"]["gridId"]
            if isinstance(recorded, str) and recorded:
                return recorded
        return generate_grid_id(secrets.SystemRandom())


def _pick_site(resources: LoadedResources, network: str, options: AgentOptions) -> str:
    """This site's name in ``network``: as given, else the network's only GridSite."""
    given = options.site.get(network)
    if given is not None:
        return given
    names = sorted(s.metadata.name for s in resources.sites if s.spec.grid_network_ref == network)
    if len(names) == 1:
        return names[0]
    where = f"GridNetwork {network!r} in {options.resources}"
    if not names:
        raise AgentConfigError(f"no GridSite of {where}: give --site [{network}=]NAME")
    raise AgentConfigError(
        f"{len(names)} GridSites of {where} ({', '.join(names)}): give --site [{network}=]NAME"
    )


def read_site_certificate(tls: SiteTls) -> str | None:
    """The site certificate of ``tls`` (None when there is none), checked to be a current
    public certificate. Raises :class:`~grid.errors.AgentConfigError` naming the file."""
    if tls.certificate is None:
        return None
    try:
        pem = tls.certificate.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        raise AgentConfigError(f"cannot read the site certificate {tls.certificate}") from None
    try:
        check_public_cert_pem(pem, datetime.now(UTC))
    except GridError as error:
        raise AgentConfigError(f"{tls.certificate}: {error}") from None
    return pem


def site_swim_credentials(tls: SiteTls, directory: Path | None) -> SwimCredentials:
    """What the SWIM nodes sign with: ``tls.crt`` and ``tls.key``, required, and ``ca.crt``
    if present. Raises :class:`~grid.errors.AgentConfigError` saying which file to fix."""
    if tls.certificate is None or tls.private_key is None:
        where = "--tls-dir" if directory is None else f"{directory} (--tls-dir)"
        raise AgentConfigError(
            f"SWIM needs the site certificate and key: put tls.crt and tls.key in {where}"
        )
    certificate_pem = _read_text(tls.certificate, "the site certificate")
    private_key_pem = _read_text(tls.private_key, "the site private key")
    ca_pem = None if tls.ca is None else _read_text(tls.ca, "the CA certificate")
    try:
        return swim_credentials(certificate_pem, private_key_pem, ca_pem)
    except ConfigError as error:
        raise AgentConfigError(f"{directory}: {error}") from None


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        raise AgentConfigError(f"cannot read {what} {path}") from None


def _scan(root: Path) -> Signature:
    """Name, modification time and size of the YAML files in ``root`` (of at most one more
    than the limit: a directory over it is refused whatever else changes); empty when it
    cannot be read."""
    entries = []
    try:
        with os.scandir(root) as listing:
            for entry in listing:
                if Path(entry.name).suffix not in YAML_SUFFIXES:
                    continue
                with contextlib.suppress(OSError):
                    info = entry.stat()
                    entries.append((entry.name, info.st_mtime_ns, info.st_size))
                if len(entries) > MAX_DIRECTORY_FILES:
                    break
    except OSError:
        return ()
    return tuple(sorted(entries))


def _files_signature(directory: Path | None) -> Signature:
    if directory is None:
        return ()
    entries = []
    for name in ("tls.crt", "tls.key", "ca.crt"):
        try:
            info = (directory / name).stat()
        except OSError:
            continue
        entries.append((name, info.st_mtime_ns, info.st_size))
    return tuple(entries)


def _summary(errors: tuple[ResourceError, ...], directory: Path) -> str:
    if not errors:
        return f"the resource directory {directory} cannot be read"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"resources not applied, the last good ones keep serving: {errors[0]}{more}"
