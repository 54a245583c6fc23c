"""Build a kustomization offline, the way ``kustomize build`` does, for the features Grid's
``deploy/`` tree uses: ``resources`` (files and kustomization directories, recursively),
JSON 6902 ``patches`` with a ``target``, ``namespace`` and ``images``.

Any other kustomization field is refused rather than ignored, so the result never differs
silently from what kustomize would produce. ``tests/test_deploy.py`` compares the two when
``kubectl`` is installed.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonpatch
import jsonpointer
import yaml

Manifest = dict[str, Any]

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "namespace", "resources", "images", "patches"})
# Built-in kinds without a namespace (the ones a Grid install can contain, and then some).
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "APIService",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
        "ValidatingWebhookConfiguration",
    }
)
_POD_SPEC_PATHS: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


class KustomizeError(ValueError):
    """The kustomization cannot be built; the message names the file and the reason."""


def build(directory: Path) -> list[Manifest]:
    """The manifests ``kustomize build directory`` produces (order aside)."""
    return _build(directory.resolve())


def load_documents(path: Path) -> list[Manifest]:
    """Every non-empty YAML document of a manifest file; each must be a Kubernetes object."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]
    except yaml.YAMLError as error:
        raise KustomizeError(f"{path}: invalid YAML: {error}") from None
    for doc in documents:
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise KustomizeError(f"{path}: every document needs apiVersion and kind")
    return documents


def object_key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    meta = obj.get("metadata") or {}
    return (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta.get("name") or "")


def _kustomization_file(directory: Path) -> Path:
    for name in KUSTOMIZATION_FILES:
        candidate = directory / name
        if candidate.is_file():
            return candidate
    raise KustomizeError(
        f"{directory}: no kustomization file; kustomize builds only directories that have one"
    )


def _build(directory: Path) -> list[Manifest]:
    path = _kustomization_file(directory)
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise KustomizeError(f"{path}: invalid YAML: {error}") from None
    if not isinstance(spec, dict):
        raise KustomizeError(f"{path}: a kustomization must be a mapping")
    unsupported = sorted(set(spec) - SUPPORTED_FIELDS)
    if unsupported:
        raise KustomizeError(f"{path}: fields not supported by this builder: {unsupported}")

    objects: list[Manifest] = []
    for entry in spec.get("resources") or []:
        objects.extend(_resource(directory, path, entry))
    _check_unique(objects, path)
    for patch in spec.get("patches") or []:
        _apply_patch(objects, patch, path)
    if spec.get("namespace"):
        _set_namespace(objects, spec["namespace"])
    for image in spec.get("images") or []:
        _set_image(objects, image, path)
    return objects


def _resource(directory: Path, kustomization: Path, entry: object) -> list[Manifest]:
    if not isinstance(entry, str):
        raise KustomizeError(f"{kustomization}: resources must be paths, got {entry!r}")
    target = (directory / entry).resolve()
    if target.is_dir():
        return _build(target)
    if not target.is_file():
        raise KustomizeError(f"{kustomization}: resource {entry!r} does not exist")
    if not target.is_relative_to(directory):
        # kustomize's default load restrictor: files must sit in or below the kustomization;
        # anything else has to be a directory with a kustomization of its own.
        raise KustomizeError(
            f"{kustomization}: security; file {target} is not in or below {directory}"
        )
    return load_documents(target)


def _check_unique(objects: Iterable[Manifest], kustomization: Path) -> None:
    seen: set[tuple[str, str, str, str]] = set()
    for obj in objects:
        key = object_key(obj)
        if key in seen:
            raise KustomizeError(f"{kustomization}: duplicate object {key}")
        seen.add(key)


def _matches(obj: Mapping[str, Any], target: Mapping[str, Any]) -> bool:
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata") or {}
    wanted = {
        "group": group,
        "version": version,
        "kind": obj["kind"],
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
    }
    unknown = set(target) - set(wanted)
    if unknown:
        raise KustomizeError(f"patch target fields not supported: {sorted(unknown)}")
    return all(wanted[field] == value for field, value in target.items())


def _apply_patch(objects: list[Manifest], patch: object, kustomization: Path) -> None:
    if not isinstance(patch, dict) or set(patch) != {"target", "patch"}:
        raise KustomizeError(f"{kustomization}: only inline patches with a target are supported")
    operations = yaml.safe_load(patch["patch"])
    if not isinstance(operations, list):
        raise KustomizeError(
            f"{kustomization}: only JSON 6902 patches (a list of ops) are supported"
        )
    matched = [index for index, obj in enumerate(objects) if _matches(obj, patch["target"])]
    if not matched:
        raise KustomizeError(f"{kustomization}: patch target {patch['target']} matches nothing")
    for index in matched:
        try:
            objects[index] = jsonpatch.apply_patch(objects[index], operations)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
            raise KustomizeError(f"{kustomization}: patch failed: {error}") from None


def _set_namespace(objects: list[Manifest], namespace: str) -> None:
    """kustomize's namespace transformer: namespaced objects move, Namespace objects are
    renamed, RoleBinding subjects in the binding's old namespace (or none) follow;
    ClusterRoleBinding subjects are left alone."""
    cluster_scoped_kinds = CLUSTER_SCOPED_KINDS | {
        crd["spec"]["names"]["kind"]
        for crd in objects
        if crd["kind"] == "CustomResourceDefinition" and crd["spec"].get("scope") == "Cluster"
    }
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if obj["kind"] == "Namespace":
            meta["name"] = namespace
            continue
        if obj["kind"] in cluster_scoped_kinds:
            continue
        previous = meta.get("namespace")
        meta["namespace"] = namespace
        if obj["kind"] == "RoleBinding":
            for subject in obj.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount" and subject.get("namespace") in (
                    None,
                    "",
                    previous,
                ):
                    subject["namespace"] = namespace


def _split_image(reference: str) -> tuple[str, str]:
    """``name`` and the ``:tag`` or ``@digest`` suffix (a registry port is not a tag)."""
    if "@" in reference:
        name, digest = reference.split("@", 1)
        return name, f"@{digest}"
    slash = reference.rfind("/")
    colon = reference.rfind(":")
    if colon > slash:
        return reference[:colon], reference[colon:]
    return reference, ""


def _set_image(objects: list[Manifest], image: object, kustomization: Path) -> None:
    if not isinstance(image, dict) or "name" not in image:
        raise KustomizeError(f"{kustomization}: every images entry needs a name")
    unknown = set(image) - {"name", "newName", "newTag", "digest"}
    if unknown:
        raise KustomizeError(f"{kustomization}: image fields not supported: {sorted(unknown)}")
    for obj in objects:
        path = _POD_SPEC_PATHS.get(obj["kind"])
        if path is None:
            continue
        pod: Any = obj
        for key in path:
            pod = pod.get(key) if isinstance(pod, dict) else None
        if not isinstance(pod, dict):
            continue
        for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
            name, suffix = _split_image(container.get("image", ""))
            if name != image["name"]:
                continue
            if "digest" in image:
                suffix = f"@{image['digest']}"
            elif "newTag" in image:
                suffix = f":{image['newTag']}"
            container["image"] = f"{image.get('newName', name)}{suffix}"


def installable_copy(repository: Path, destination: Path) -> Path:
    """Copy ``deploy/`` and ``crds/`` (with the kustomization through which ``deploy/``
    includes the CRDs) to ``destination`` and return it."""
    shutil.copytree(repository / "deploy", destination / "deploy")
    shutil.copytree(repository / "crds", destination / "crds")
    return destination
