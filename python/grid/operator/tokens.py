"""Where the operator's minters (:class:`~grid.runtime.tokens.TokenMinters`) read and
write: an Oauth2 provider's Secret through the Kubernetes API, and its token to the Secret
``grid-token-<provider>`` beside it (the namespace the gateway mounts its credentials from),
key ``token``, which the overlay's reference names. The operator creates that Secret with
Grid's labels and replaces its data at each refresh; a Secret of that name without the
labels is never overwritten (the provider's ``CredentialsValid`` says so)."""

from __future__ import annotations

import base64
import binascii

from grid.errors import CredentialMaterialError, KubernetesApiError
from grid.operator.kube import KubeApi
from grid.runtime.tokens import MinterIo, MintingPlan, SecretSource, TokenSink

MINTED_LABELS = {
    "app.kubernetes.io/managed-by": "grid",
    "grid.praxis-proxy.io/credential": "minted-token",
}
"""What marks a Secret as one the operator writes tokens to."""


def operator_io(kube: KubeApi) -> MinterIo:
    def io(plan: MintingPlan) -> tuple[SecretSource, TokenSink]:
        return secret_source(kube, *plan.secret), token_sink(kube, *plan.output)

    return io


def secret_source(kube: KubeApi, namespace: str, name: str, key: str) -> SecretSource:
    """Reads the entry at each attempt (a rotated Secret is used from the next one on)."""

    async def read() -> bytes:
        try:
            data = await kube.read_secret(namespace, name)
        except KubernetesApiError as error:
            raise CredentialMaterialError(str(error)) from None
        if data is None:
            raise CredentialMaterialError("the Secret named by spec.auth.secretRef does not exist")
        encoded = data.get(key)
        del data  # the other entries are not this provider's business
        if encoded is None:
            raise CredentialMaterialError("the Secret has no entry for spec.auth.secretRef.key")
        try:
            value = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise CredentialMaterialError("the Secret's entry is not base64") from None
        if not value:
            raise CredentialMaterialError("the credential in the Secret is empty")
        return value

    return read


def token_sink(kube: KubeApi, namespace: str, name: str, key: str) -> TokenSink:
    async def write(token: str) -> None:
        encoded = base64.b64encode(token.encode()).decode()
        await kube.put_owned_secret(namespace, name, MINTED_LABELS, {key: encoded})

    return write
