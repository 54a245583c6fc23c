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
