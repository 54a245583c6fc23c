"""Fail fast, in one line (issue 19): a configuration that cannot work ends ``grid agent``,
``grid render``/``explain``, ``grid demo`` and ``grid bench`` at once with exit status 2
and one line on standard error saying what to fix (with "did you mean" for a typo'd
name), never a traceback. A good start still starts; what fails after it (a port taken
when the SWIM node restarts, a key file rotated to garbage) keeps the agent up and shows
in ``/healthz`` and ``/status``.

Every command runs as a real process (``python -m grid.cli``)."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grid.demo.mesh import free_port
from support.agents import AgentProcess
from support.swim import site_certificate
from test_agent import NETWORK, SITE, SITE_YAML, Lab, agent_args, network_yaml, write_tls

GOLDEN_MESH = Path(__file__).resolve().parent / "golden" / "mesh"
AGENT_PREFIX = "grid agent: "
RENDER_PREFIX = "grid: "


def grid(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grid.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def refused(finished: subprocess.CompletedProcess[str], prefix: str) -> str:
    """The one line a refused command printed (after checking it is one line, exit 2, no
    traceback, nothing on standard output)."""
    assert "Traceback" not in finished.stderr, finished.stderr
    lines = finished.stderr.splitlines()
    assert len(lines) == 1, finished.stderr
    assert finished.returncode == 2, finished.stderr
    assert finished.stdout == ""
    assert lines[0].startswith(prefix), lines[0]
    return lines[0].removeprefix(prefix)


# --- grid agent: refused at start ----------------------------------------------------------


@pytest.fixture
def lab(tmp_path: Path) -> Lab:
    lab = Lab(tmp_path)
    lab.write("00-network.yaml", network_yaml())
    lab.write("10-site.yaml", SITE_YAML)
    return lab


@pytest.fixture
def udp_in_use() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


@pytest.fixture
def tcp_in_use() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])


def test_a_bind_address_that_does_not_parse(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, "--bind", "notanaddress")), AGENT_PREFIX)
    assert line == "--bind address 'notanaddress' is not 'host:port' (IPv6 as '[addr]:port')"


def test_a_udp_port_in_use(lab: Lab, udp_in_use: int) -> None:
    bind = f"127.0.0.1:{udp_in_use}"
    line = refused(grid(*agent_args(lab, "--bind", bind)), AGENT_PREFIX)
    assert line == (
        f"cannot bind SWIM (UDP) to {bind}: Address already in use; stop what holds it or "
        f"give another --bind [{NETWORK}=]HOST:PORT"
    )


def test_the_default_port_in_use_names_the_network_s_swim_port(lab: Lab, udp_in_use: int) -> None:
    lab.write("00-network.yaml", network_yaml().replace("swim: {", f"swim: {{port: {udp_in_use}, "))
    args = [a for a in agent_args(lab) if a not in ("--bind", "127.0.0.1:0")]
    line = refused(grid(*args), AGENT_PREFIX)
    assert line.startswith(
        f"cannot bind SWIM (UDP) to 127.0.0.1:{udp_in_use} (GridNetwork {NETWORK}'s "
        "spec.swim.port): Address already in use"
    )


def test_an_address_of_another_machine(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, "--bind", "192.0.2.1:7946")), AGENT_PREFIX)
    assert line == (
        "cannot bind SWIM (UDP) to 192.0.2.1:7946: Cannot assign requested address; it is "
        f"not an address of this machine: give one that is as --bind [{NETWORK}=]HOST:PORT"
    )


def test_a_wildcard_bind_needs_an_advertised_address(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, "--bind", "0.0.0.0:0")), AGENT_PREFIX)
    assert line == (
        "--bind 0.0.0.0:0 is a wildcard address, which peers cannot reach: give "
        f"--advertise [{NETWORK}=]HOST:PORT too"
    )


def test_a_missing_key_file(lab: Lab) -> None:
    args = agent_args(lab, "--key-file", "/nonexistent.key", key=False)
    line = refused(grid(*args), AGENT_PREFIX)
    assert line == "cannot read key file /nonexistent.key: No such file or directory"


def test_a_key_file_that_holds_no_key(lab: Lab) -> None:
    lab.key.write_text("not a key\n")
    line = refused(grid(*agent_args(lab)), AGENT_PREFIX)
    assert line.startswith(f"key file {lab.key}, line 1: not base64")


def test_no_key_file_at_all(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, key=False)), AGENT_PREFIX)
    assert line == (
        f"network {NETWORK}: SWIM needs a key file and none is given: give --key-file "
        f"[{NETWORK}=]FILE (head -c 32 /dev/urandom > swim.key, the same file at every site)"
    )


def test_no_tls_files(lab: Lab, tmp_path: Path) -> None:
    line = refused(grid(*agent_args(lab, tls=False)), AGENT_PREFIX)
    assert line == ("SWIM needs the site certificate and key: put tls.crt and tls.key in --tls-dir")
    empty = tmp_path / "empty"
    empty.mkdir()
    line = refused(grid(*agent_args(lab, "--tls-dir", str(empty), tls=False)), AGENT_PREFIX)
    assert line == (
        f"SWIM needs the site certificate and key: put tls.crt and tls.key in {empty} (--tls-dir)"
    )
    missing = tmp_path / "nowhere"
    line = refused(grid(*agent_args(lab, "--tls-dir", str(missing), tls=False)), AGENT_PREFIX)
    assert line == f"--tls-dir {missing} is not a directory"


def test_a_certificate_that_does_not_name_the_site(lab: Lab, tmp_path: Path) -> None:
    other = write_tls(tmp_path / "other-tls", site_certificate("site-b"))
    line = refused(grid(*agent_args(lab, "--tls-dir", str(other), tls=False)), AGENT_PREFIX)
    assert line.startswith(f"network {NETWORK}: SWIM cannot start: ")
    assert f'does not name site "{SITE}"' in line


def test_a_site_that_is_not_a_gridsite_gets_did_you_mean(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, "--site", "site-aa")), AGENT_PREFIX)
    assert line == (
        f"--site site-aa is not a GridSite of GridNetwork {NETWORK!r} in {lab.resources}: "
        f"did you mean {SITE!r}? (its GridSites: {SITE})"
    )
    line = refused(grid(*agent_args(lab, "--site", "nosuch")), AGENT_PREFIX)
    assert line == (
        f"--site nosuch is not a GridSite of GridNetwork {NETWORK!r} in {lab.resources} "
        f"(its GridSites: {SITE})"
    )


def test_a_network_name_that_is_not_a_gridnetwork_gets_did_you_mean(lab: Lab) -> None:
    line = refused(grid(*agent_args(lab, "--site", f"lba={SITE}")), AGENT_PREFIX)
    assert line == (
        f"--site lba=...: there is no GridNetwork 'lba' in {lab.resources}: "
        f"did you mean {NETWORK!r}? (GridNetworks: {NETWORK})"
    )


def test_with_two_networks_each_needs_its_site_and_key(lab: Lab) -> None:
    lab.write(
        "01-other.yaml",
        network_yaml()
        .replace(f"name: {NETWORK}", "name: other")
        .replace("gridId: lab-grid", "gridId: other-grid"),
    )
    lab.write(
        "11-other-site.yaml",
        SITE_YAML.replace(f"gridNetworkRef: {NETWORK}", "gridNetworkRef: other").replace(
            f"name: {SITE}\n", "name: site-a-other\n"
        ),
    )
    # One --site for both networks: it is no GridSite of the second one.
    line = refused(grid(*agent_args(lab, "--site", SITE)), AGENT_PREFIX)
    assert line == (
        f"--site {SITE} is a GridSite of another network, not of GridNetwork 'other' "
        "(its GridSites: site-a-other): give --site other=NAME"
    )
    # Each its own site, but a key file for one network only.
    sites = ["--site", SITE, "--site", "other=site-a-other"]
    only_lab = ["--key-file", f"{NETWORK}={lab.key}"]
    line = refused(grid(*agent_args(lab, *sites, *only_lab, key=False)), AGENT_PREFIX)
    assert line.startswith(
        "network other: SWIM needs a key file and none is given: give --key-file [other=]FILE"
    )


def test_an_http_port_in_use(lab: Lab, tcp_in_use: int) -> None:
    address = f"127.0.0.1:{tcp_in_use}"
    line = refused(grid(*agent_args(lab, "--http", address)), AGENT_PREFIX)
    assert line == (
        f"cannot listen on --http {address}: Address already in use; stop what holds it or "
        "give another --http"
    )


def test_a_state_directory_that_is_a_file(lab: Lab, tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    args = agent_args(lab)
    args[args.index("--state-dir") + 1] = str(file)
    assert refused(grid(*args), AGENT_PREFIX) == f"--state-dir {file} is not a directory"


def test_no_gridnetwork(lab: Lab) -> None:
    (lab.resources / "00-network.yaml").unlink()
    assert refused(grid(*agent_args(lab)), AGENT_PREFIX) == f"no GridNetwork in {lab.resources}"


# --- grid agent: a good start, and failures after it ----------------------------------------


def http_get(address: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except OSError:
        return 0, ""


class Running(AgentProcess):
    """A ``grid agent`` process serving HTTP on a port of its own, reloading often."""

    def __init__(self, lab: Lab, args: list[str]) -> None:
        self.http = f"127.0.0.1:{free_port(socket.SOCK_STREAM)}"
        options = ["--http", self.http, "--reload-interval", "0.1"]
        super().__init__([*args, *options], lab.resources.parent / "agent.log")

    def status(self) -> dict[str, object]:
        code, text = http_get(self.http, "/status")
        return json.loads(text) if code == 200 else {}

    def swim_error(self) -> str | None:
        networks = self.status().get("networks")
        if not isinstance(networks, dict) or NETWORK not in networks:
            return None
        error = networks[NETWORK]["membership"]["swimError"]
        return error if isinstance(error, str) else None

    def healthz(self) -> int:
        return http_get(self.http, "/healthz")[0]


@pytest.fixture
def running(lab: Lab) -> Iterator[Callable[[list[str]], Running]]:
    started: list[Running] = []

    def start(args: list[str]) -> Running:
        agent = Running(lab, args)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def test_a_good_start_starts_and_stops_cleanly(
    lab: Lab, running: Callable[[list[str]], Running]
) -> None:
    agent = running(agent_args(lab, "--site", SITE))
    agent.wait_until("healthy", lambda: agent.healthz() == 200)
    assert agent.swim_error() is None
    assert agent.stop() == 0
    log = agent.log.read_text()
    assert "Traceback" not in log and " ERROR " not in log
    assert f"site {SITE} stopped (left the mesh)" in log


def test_a_network_without_gateways_starts_with_one_warning(
    lab: Lab, running: Callable[[list[str]], Running]
) -> None:
    lab.write("00-network.yaml", network_yaml().replace("gatewayRefs: [", "gatewayRefs: [] #"))
    agent = running(agent_args(lab))
    agent.wait_until("healthy", lambda: agent.healthz() == 200)
    warnings = [line for line in agent.log.read_text().splitlines() if "gatewayRefs" in line]
    assert len(warnings) == 1
    assert warnings[0].endswith(
        f"WARNING grid.agent: GridNetwork {NETWORK} lists no gatewayRefs: no overlay will be "
        "written for it"
    )
    assert agent.stop() == 0


def test_a_key_file_rotated_to_garbage_keeps_the_agent_up_and_is_shown(
    lab: Lab, running: Callable[[list[str]], Running]
) -> None:
    agent = running(agent_args(lab))
    agent.wait_until("healthy", lambda: agent.healthz() == 200)
    lab.key.write_text("not base64 at all!\n")
    os.utime(lab.key, ns=(time.time_ns() + 10**7,) * 2)
    agent.wait_until("the bad key file shown", lambda: str(lab.key) in (agent.swim_error() or ""))
    # The node keeps running with the keys it had: still healthy, the error in /status.
    assert agent.process.poll() is None
    assert agent.healthz() == 200
    lab.key.write_bytes(secrets.token_bytes(32))
    os.utime(lab.key, ns=(time.time_ns() + 2 * 10**7,) * 2)
    agent.wait_until("the error cleared", lambda: agent.swim_error() is None)
    assert agent.stop() == 0


def test_a_port_taken_when_the_node_restarts_keeps_the_agent_up_and_is_shown(
    lab: Lab, running: Callable[[list[str]], Running]
) -> None:
    first = free_port(socket.SOCK_DGRAM)
    with_port = network_yaml().replace("swim: {", "swim: {port: PORT, ")
    lab.write("00-network.yaml", with_port.replace("PORT", str(first)))
    # No --bind: the node binds 127.0.0.1 and the network's swim.port.
    agent = running([a for a in agent_args(lab) if a not in ("--bind", "127.0.0.1:0")])
    agent.wait_until("healthy", lambda: agent.healthz() == 200)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind(("127.0.0.1", 0))
        taken = int(held.getsockname()[1])
        lab.write("00-network.yaml", with_port.replace("PORT", str(taken)))
        agent.wait_until("unhealthy", lambda: agent.healthz() == 503)
        agent.wait_until(
            "the bind error shown", lambda: "Address already in use" in (agent.swim_error() or "")
        )
        assert f"SWIM cannot start on 127.0.0.1:{taken}" in (agent.swim_error() or "")
        assert agent.process.poll() is None
    # Released: the node starts on it.
    agent.wait_until("healthy again", lambda: agent.healthz() == 200)
    assert agent.stop() == 0


# --- grid render and grid explain ------------------------------------------------------------


def render(*args: str, command: str = "render") -> subprocess.CompletedProcess[str]:
    return grid(command, "--resources", str(GOLDEN_MESH), "--now", "2026-07-29T12:00:00Z", *args)


@pytest.mark.parametrize("command", ["render", "explain"])
def test_an_unknown_site_is_refused_with_did_you_mean(command: str) -> None:
    finished = render("--site", "alpah", "--gateway", "edge-gateway", command=command)
    assert refused(finished, RENDER_PREFIX) == (
        "site 'alpah' is not a GridSite: did you mean 'alpha'? (GridSites: alpha, beta, "
        "gamma); --allow-unknown-site renders for a site not created yet"
    )
    finished = render("--site", "nosuch", "--gateway", "edge-gateway", command=command)
    assert refused(finished, RENDER_PREFIX) == (
        "site 'nosuch' is not a GridSite (GridSites: alpha, beta, gamma); "
        "--allow-unknown-site renders for a site not created yet"
    )


def test_a_site_not_created_yet_renders_when_asked_for() -> None:
    finished = render("--site", "delta", "--gateway", "edge-gateway", "--allow-unknown-site")
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["scope"]["local_site"] == "delta"
    assert finished.stderr.splitlines() == [
        "grid: note: site 'delta' is not a GridSite of 'golden': it is unknown, so providers "
        "with an access policy are left out"
    ]


@pytest.mark.parametrize("command", ["render", "explain"])
def test_an_unknown_gateway_is_refused_with_did_you_mean_and_the_list(command: str) -> None:
    finished = render("--site", "alpha", "--gateway", "edge-gatway", command=command)
    assert refused(finished, RENDER_PREFIX) == (
        "GridNetwork 'golden' lists no gateway 'edge-gatway': did you mean 'edge-gateway'? "
        "(gatewayRefs: grid-system/edge-gateway, grid-system/next-gateway)"
    )
    finished = render("--site", "alpha", "--gateway", "nosuch", command=command)
    assert refused(finished, RENDER_PREFIX) == (
        "GridNetwork 'golden' lists no gateway 'nosuch' "
        "(gatewayRefs: grid-system/edge-gateway, grid-system/next-gateway)"
    )


def test_a_namespace_the_gateway_is_not_in_says_where_it_is() -> None:
    finished = render("--site", "alpha", "--gateway", "edge-gateway", "--namespace", "wrong")
    assert refused(finished, RENDER_PREFIX) == (
        "GridNetwork 'golden' lists gateway 'edge-gateway' in namespace grid-system, not "
        "'wrong': give --namespace grid-system"
    )
    right = render("--site", "alpha", "--gateway", "edge-gateway", "--namespace", "grid-system")
    assert right.returncode == 0, right.stderr


# --- grid demo and grid bench ----------------------------------------------------------------


def test_a_demo_output_that_cannot_be_written(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    cases = {
        "/proc/x": "No such file or directory",
        str(file): "Not a directory",
        str(file / "below"): "Not a directory",
    }
    for out, reason in cases.items():
        line = refused(grid("demo", "--out", out), RENDER_PREFIX)
        assert line == f"cannot write the demo output to {out}: {reason}"


def test_a_bench_scenario_typo_gets_did_you_mean() -> None:
    line = refused(grid("bench", "convergence", "--scenario", "joins"), "grid bench convergence: ")
    assert line == (
        "unknown scenario 'joins': did you mean 'join'? "
        "(scenarios: accuracy, failure, join, partition, speed, state)"
    )
