"""Helm for the tests of Grid's chart (``deploy/helm/grid``).

The helm binary is the one ``scripts/control-plane`` builds from its Go module
(``helm.sh/helm/v4``) next to kube-apiserver and kubectl, found the way
:func:`k8s.control_plane.programs_folder` finds those: built under ``CI=true`` when missing,
:class:`~k8s.control_plane.ControlPlaneUnavailable` (saying to run the script) elsewhere.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from k8s.control_plane import ControlPlaneUnavailable, programs_folder
from k8s.kustomize import Manifest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "grid"
HELM_TIMEOUT_S = 120.0


def helm_binary() -> Path:
    """The built helm. scripts/control-plane builds it together with the control plane's
    other programs, so the folder that holds those holds helm too; should it not (a build
    cut short), the error says to run the script, under ``CI=true`` as well."""
    folder = programs_folder()
    helm = folder / "helm"
    if not os.access(helm, os.X_OK):
        raise ControlPlaneUnavailable(f"helm not built in {folder}: run scripts/control-plane")
    return helm


class HelmError(AssertionError):
    """helm exited with an error; the message holds the command and helm's standard error.
    An AssertionError, as the control plane's kubectl raises: in a test it reads as the
    failure it is."""


@dataclass(frozen=True)
class Helm:
    """helm with its cache, configuration and data under ``home`` (never the user's)."""

    binary: Path
    home: Path

    def environment(self) -> dict[str, str]:
        """The variables that keep helm's cache, configuration and data under ``home``: for
        helm run by :meth:`run`, or from a shell (a documented block run as written)."""
        return {
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }

    def run(
        self, *arguments: str, stdin: str | None = None, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs helm, against the cluster ``kubeconfig`` names if given (else whatever the
        environment's ``KUBECONFIG`` says: ``template`` needs no cluster); a non-zero exit
        raises :class:`HelmError`."""
        environment = {**os.environ, **self.environment()}
        if kubeconfig is not None:
            environment["KUBECONFIG"] = str(kubeconfig)
        done = subprocess.run(
            [str(self.binary), *arguments],
            input=stdin,
            capture_output=True,
            text=True,
            env=environment,
            cwd=REPO,
            timeout=HELM_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise HelmError(
                f"helm {' '.join(arguments)} failed ({done.returncode}): "
                f"{done.stderr.strip()[-2000:]}"
            )
        return done

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        release: str = "grid",
        namespace: str = "grid-system",
        include_crds: bool = False,
    ) -> list[Manifest]:
        """The objects ``helm template`` renders from the chart for these values (given to
        helm as a values file on its standard input)."""
        arguments = ["template", release, str(CHART), "--namespace", namespace, "--values", "-"]
        if include_crds:
            arguments.append("--include-crds")
        done = self.run(*arguments, stdin=yaml.safe_dump(dict(values or {})))
        return [document for document in yaml.safe_load_all(done.stdout) if document]
