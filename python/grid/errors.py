"""Grid's exceptions. Defined here and raised from Python and from ``grid._native``.

None of them ever carries secret material: messages name keys by their public id, files by
path and fields by name, never by value.
"""


class GridError(Exception):
    """Base of every error Grid raises on purpose."""


class ConfigError(GridError, ValueError):
    """A setting is invalid: the message says which one and why."""


class InvalidKeyError(ConfigError):
    """A SWIM key is not 32 bytes, is unknown to the keyring, or may not be removed."""


class FrameDropped(GridError):
    """A received frame was refused; ``args[0]`` is the reason code
    (``too_short``, ``bad_magic``, ``unknown_version``, ``auth_failed``)."""

    @property
    def reason(self) -> str:
        return str(self.args[0])


class TrustError(GridError):
    """A certificate, a fingerprint pin or a TLS setting was refused. Messages name files
    by path and certificates by fingerprint; they never quote key material."""


class TrustConfigError(TrustError, ConfigError):
    """A trust setting is unusable: a malformed fingerprint pin, an egress address that is
    not ``host:port``, an unreadable CA, client certificate or key file."""


class CertificateRejected(TrustError):
    """A certificate PEM failed the structural checks; ``args[0]`` is the reason code
    (``not_text``, ``too_large``, ``empty``, ``private_key``, ``not_pem``,
    ``too_many_blocks``, ``not_certificate``, ``malformed``, ``expired``,
    ``not_yet_valid``) and ``args[1]`` the explanation."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)

    @property
    def reason(self) -> str:
        return str(self.args[0])

    def __str__(self) -> str:
        return str(self.args[1])


class CanonicalJsonError(GridError, ValueError):
    """A value has no JSON serialization Grid will write: NaN or an infinity, an integer
    beyond ±(2**53 - 1) in canonical JSON, an object key that is not a str, a type JSON does
    not have (tuple, set, bytes, any other object), a string with a lone surrogate, or
    nesting deeper than ``grid._native.MAX_JSON_DEPTH``. The message says which, and where:
    ``... at $.candidates[3].score``."""


class ScoringInputError(ConfigError):
    """A scoring input is unusable: a metric out of range, a malformed label selector, two
    candidates with the same (provider, model, site). The message names the provider and the
    field, never a credential."""


class OverlayRenderError(GridError):
    """No overlay document could be rendered (too large, inconsistent scope); the caller keeps
    the previous document and reports the message in status."""


class EmptyOverlayError(OverlayRenderError):
    """Every candidate was left out, and the gateway rejects an overlay with none: the previous
    document stays in place. ``left_out`` says why each provider was left out."""

    def __init__(self, message: str, left_out: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.left_out = left_out


class MetricsFileError(ConfigError):
    """A what-if metrics file is unreadable or malformed: the message names the provider and
    the field."""


class CrdtValueError(GridError, ValueError):
    """A record or operation handed to the CRDT state is invalid: the message names the
    field and the rule it breaks, never the value."""


class CrdtDecodeError(GridError, ValueError):
    """A received state item was refused (malformed, truncated, oversized, non-canonical or
    inconsistent with its lane, key or version); the state is left unchanged."""


class CrdtForgedItemError(CrdtDecodeError):
    """A received state item describes a site other than the one that sent it."""


class CrdtLimitError(GridError):
    """A CRDT bound would be exceeded (item size, slots per counter, tracked counters,
    providers per site, sites); nothing was changed."""


class ResourceError(ConfigError):
    """One problem in one resource document: where it is and why it is wrong.

    ``file`` and ``document`` (0-based index in a multi-document YAML file) are set when the
    resource came from a file; ``path`` is the field path (``spec.swim.probeInterval``,
    ``spec.models[0].name``; empty for the document as a whole). The message never quotes a
    field's value.
    """

    def __init__(
        self,
        reason: str,
        *,
        path: str = "",
        file: str | None = None,
        document: int | None = None,
        kind: str | None = None,
        name: str | None = None,
    ) -> None:
        self.reason = reason
        self.path = path
        self.file = file
        self.document = document
        self.kind = kind
        self.name = name
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.document is not None:
            where.append(f"document {self.document}")
        if self.kind is not None:
            where.append(f"{self.kind} {self.name}" if self.name else self.kind)
        prefix = ", ".join(where)
        field = f"{self.path}: " if self.path else ""
        return f"{prefix}: {field}{self.reason}" if prefix else f"{field}{self.reason}"


class InvalidResourceError(ConfigError):
    """A resource document has one or more problems; ``errors`` lists each of them."""

    def __init__(self, errors: list[ResourceError]) -> None:
        self.errors = tuple(errors)
        super().__init__("; ".join(str(error) for error in self.errors))


class SwimConfigError(ConfigError):
    """A SWIM node setting is invalid: site name, address, seed, timing or event capacity."""


class SiteCredentialsError(ConfigError):
    """The site's certificate, private key or trust anchors cannot sign for the site: the
    certificate does not name it, does not chain to the network CA (or match its pin), is
    expired, or the key is not the certificate's. Never quotes key material."""


class BindError(ConfigError):
    """The SWIM UDP socket cannot be set up on the address given (in use, not local, ...)."""


class BroadcastRefused(GridError, ValueError):
    """A broadcast item was refused before anything was sent: unknown lane, bad key, or a
    full item store."""


class PayloadTooLarge(BroadcastRefused):
    """The item does not fit in one packet; split the data across several keys."""


class PrivateKeyMaterial(BroadcastRefused):
    """A cert-lane payload contains a private key marker; only public certificates travel."""


class NodeStateError(GridError, RuntimeError):
    """The SWIM node cannot do this in its current state (for example, started twice)."""


class NodeStopped(NodeStateError):
    """The SWIM node is not running: never started, left, or closed."""


class KeyFileError(ConfigError):
    """A SWIM key file is unreadable or does not hold 32-byte keys (raw, or base64 one per
    line). The message names the file and the line, never the key."""


class AgentConfigError(ConfigError):
    """The standalone agent cannot start with these options or resources: the message says
    which option or resource and why."""


class OperatorConfigError(ConfigError):
    """``grid operator`` cannot start with these options or this environment: the message
    names the option or environment variable and why."""


class SecretMaterialError(ConfigError):
    """A Secret named by a GridNetwork or an InferenceProvider is missing, unreadable or
    holds unusable material. The message names the Secret (namespace, name, key) and the
    rule it breaks, never the bytes it holds."""


class KubernetesApiError(GridError):
    """A call to the Kubernetes API failed; ``status`` is the HTTP status (0 when the API
    was not reached) and the message names the operation and the object, never a body."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class SimulationError(ConfigError):
    """A simulation setting or scenario step was refused (an unknown node, a probability
    outside [0, 1], a time in the past, a restart of a running node); nothing changed."""


class CredentialMaterialError(ConfigError):
    """A provider's Secret does not hold what its auth strategy needs (a client secret, a
    PEM private key, a service-account key file). The message says what is missing or
    malformed, never the content."""


class TokenEndpointError(GridError):
    """A token endpoint could not be asked (``unreachable``), or answered with an error or
    with something that is no token. The message is short and secret-free: an OAuth error
    code at most, never the response body (it may echo the client's credentials)."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable
