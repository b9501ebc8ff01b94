"""The exception tree of hci-envs.

Every error the library raises on purpose derives from :class:`HciEnvsError`, so callers can catch one root.
Each boundary translates errors into its own form (an MCP tool error, an HTTP 4xx body, a WebSocket error
frame) and back (the client raises the matching class), so the same failure reads the same everywhere.

    HciEnvsError
    ├── ActionError                 an action could not be carried out
    │   ├── InvalidActionError      the action is malformed or out of range (names the field)
    │   ├── UnknownToolError        no tool by that name
    │   ├── HumanControlError       a human holds the desktop; agent input is refused
    │   └── ActionTimeoutError      the action ran past its time limit
    ├── DesktopError                the virtual desktop itself failed
    │   ├── DisplayStartError       Xvfb, the window manager or an app did not come up
    │   ├── DesktopDiedError        the display died under a running episode (truncates it)
    │   └── MissingDependencyError  a system program or optional package is not installed
    ├── EnvironmentStateError       the call does not fit the episode's state (step before reset, after close)
    ├── SessionError                session bookkeeping on a server
    │   ├── SessionNotFoundError
    │   ├── CapacityError           max_sessions reached, or every agent account in use
    │   └── TooManyCallsError       a session has too many calls waiting
    ├── AuthError                   a missing or wrong secret
    ├── ModeError                   refused by the server's mode (reset in production)
    ├── ConfigError                 a bad setting, refused before anything starts
    │   └── ToolDefinitionError     a class's tools cannot be registered (hci_envs.tools)
    │       └── DuplicateToolError  two traits offer one tool name
    ├── TransportError              the server could not be reached or broke the protocol
    └── ProviderError               a provider could not start or reach its server

Defined next to their features: ``InvalidActionError`` > ``UnsupportedActionError`` (hci_envs.adapters),
``TaskFormatError`` (hci_envs.tasks, also a ValueError), ``EnvCheckError`` (hci_envs.checks, also an
AssertionError), both directly under HciEnvsError. Not an error:
``hci_envs.adapters.EpisodeSignal``, an agent's "done"/"fail" carried out of an adapter.
"""

from __future__ import annotations

from typing import Any


class HciEnvsError(Exception):
    """Root of every error hci-envs raises on purpose.

    ``code`` is a stable machine-readable name used on the wire (WebSocket error frames, HTTP bodies).
    """

    code = "ERROR"

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


class ActionError(HciEnvsError):
    code = "ACTION_ERROR"


class InvalidActionError(ActionError, ValueError):
    """The action is malformed or out of range. ``field`` names the offending field when there is one."""

    code = "VALIDATION_ERROR"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        if field is not None:
            details["field"] = field
        super().__init__(message, **details)
        self.field = field


class UnknownToolError(ActionError):
    code = "UNKNOWN_TOOL"


class HumanControlError(ActionError):
    code = "HUMAN_CONTROL"


class ActionTimeoutError(ActionError):
    code = "TIMEOUT"


class DesktopError(HciEnvsError):
    code = "DESKTOP_ERROR"


class DisplayStartError(DesktopError):
    code = "DISPLAY_START_FAILED"


class DesktopDiedError(DesktopError):
    code = "DESKTOP_DIED"


class MissingDependencyError(DesktopError, ImportError):
    code = "MISSING_DEPENDENCY"


class EnvironmentStateError(HciEnvsError):
    code = "STATE_ERROR"


class SessionError(HciEnvsError):
    code = "SESSION_ERROR"


class SessionNotFoundError(SessionError):
    code = "SESSION_NOT_FOUND"


class CapacityError(SessionError):
    code = "CAPACITY_REACHED"


class TooManyCallsError(SessionError):
    code = "TOO_MANY_CALLS"


class AuthError(HciEnvsError):
    code = "UNAUTHORIZED"


class ModeError(HciEnvsError):
    code = "MODE_FORBIDDEN"


class ConfigError(HciEnvsError, ValueError):
    code = "CONFIG_ERROR"


class TransportError(HciEnvsError):
    code = "TRANSPORT_ERROR"


class ProviderError(HciEnvsError):
    code = "PROVIDER_ERROR"


_BY_CODE: dict[str, type[HciEnvsError]] = {}


def _index(cls: type[HciEnvsError]) -> None:
    _BY_CODE.setdefault(cls.code, cls)
    for sub in cls.__subclasses__():
        _index(sub)


_index(HciEnvsError)


def error_from_dict(data: dict[str, Any]) -> HciEnvsError:
    """Rebuild the exception a server described with :meth:`HciEnvsError.to_dict` (used by clients)."""
    details = {k: v for k, v in data.items() if k not in ("code", "message")}
    cls = _BY_CODE.get(str(data.get("code")), HciEnvsError)
    message = str(data.get("message", "unknown error"))
    if cls is InvalidActionError:
        return InvalidActionError(message, **details)
    err = cls(message, **details)
    return err


def require(module: str, extra: str, purpose: str) -> Any:
    """Import an optional dependency or explain which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(
            f"{purpose} needs the Python package '{module.split('.')[0]}', which is not installed. "
            f"Install it with: pip install 'hci-envs[{extra}]'",
            module=module,
            extra=extra,
        ) from exc
