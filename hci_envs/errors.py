"""The exception tree of hci-envs.

Every error the library raises on purpose derives from :class:`HciEnvsError`, so callers can catch one root.
Each boundary translates errors into its own form (an MCP tool error, an HTTP 4xx body, a WebSocket error
frame) and back (the client raises the matching class), so the same failure reads the same everywhere.

    HciEnvsError
    ├── ActionError                 an action could not be carried out
    │   ├── InvalidActionError      the action is malformed or out of range (names the field)
    │   ├── UnknownToolError        no tool by that name
    │   ├── HumanControlError       a human holds the desktop; agent input is refused
    │   ├── StaleElementError       an element number that no longer names an element on screen
    │   └── ActionTimeoutError      the action ran past its time limit
    │       ├── UnsupportedActionError  an adapter's action has no canonical form (hci_envs.adapters)
    │       └── UnknownKeyError          a key name that is no key (hci_envs.actions)
    ├── DesktopError                the virtual desktop itself failed
    │   ├── DisplayStartError       Xvfb, the window manager or an app did not come up
    │   ├── DesktopDiedError        the display died under a running episode (truncates it)
    │   ├── DesktopLostError        a pooled desktop's node or actor is gone (hci_envs.cluster)
    │   └── MissingDependencyError  a system program or optional package is not installed
    ├── EnvironmentStateError       the call does not fit the episode's state (after close, after the end)
    │   ├── NotResetError           a step or a tool before the first reset
    │   └── HandoverError           a hand-over call that does not fit it (asked twice, taken already)
    ├── SessionError                session bookkeeping on a server
    │   ├── SessionNotFoundError
    │   ├── CapacityError           max_sessions reached, or every agent account in use
    │   └── TooManyCallsError       a session has too many calls waiting
    ├── AuthError                   a missing or wrong secret
    ├── ModeError                   refused by the server's mode (reset in production)
    ├── ConfigError                 a bad setting, refused before anything starts (also a ValueError)
    │   └── ToolDefinitionError     a class's tools cannot be registered (hci_envs.tools)
    │       └── DuplicateToolError  two traits offer one tool name
    ├── StorageError                no space left on the disk (HTTP 507)
    ├── SnapshotError               a snapshot could not be taken (too large, disk full)
    ├── TaskFormatError             a task file is malformed (hci_envs.tasks; also a ValueError)
    ├── EpisodeFormatError          an episode folder is malformed (recorders; also a ValueError)
    ├── VideoError                  an episode's video could not be made (recorders)
    ├── EnvCheckError               an environment breaks the contract (hci_envs.env.env_checker; an AssertionError)
    ├── RfbError                    a VNC peer broke the RFB protocol (hci_envs.vnc)
    ├── TransportError              the server could not be reached or broke the protocol
    ├── ProviderError               a provider could not start or reach its server (also a RuntimeError)
    └── PoolError                   a desktop pool could not start, or was handed what it does not own
        └── NoDesktopReadyError     no desktop became ready to claim in time (hci_envs.cluster)

Each class registers its ``code`` when it is defined (``__init_subclass__``), so a client rebuilds the very
class a server raised, and a code names one class only. How a code travels (HTTP status, OpenEnv WebSocket
error code, OpenEnv tool error type) is one table, :data:`WIRE`; every boundary reads it through
:func:`wire_form`. Every class lives here, so a client that never imports a feature still knows its errors;
the feature modules re-export theirs. Not an error: ``hci_envs.adapters.EpisodeSignal``, an agent's
"done"/"fail" carried out of an adapter.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class HciEnvsError(Exception):
    """Root of every error hci-envs raises on purpose.

    ``code`` is a stable machine-readable name used on the wire (WebSocket error frames, HTTP bodies, MCP
    tool errors). A subclass that declares a ``code`` registers it; one code names one class.
    """

    code = "ERROR"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            taken = _BY_CODE.get(cls.code)
            if taken is not None and taken.__qualname__ != cls.__qualname__:
                raise TypeError(f"error code {cls.code!r} of {cls.__qualname__} is already {taken.__qualname__}'s")
            _BY_CODE[cls.code] = cls

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}


_BY_CODE: dict[str, type[HciEnvsError]] = {HciEnvsError.code: HciEnvsError}


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


class UnsupportedActionError(InvalidActionError):
    """An adapter's action that has no canonical equivalent."""

    code = "UNSUPPORTED_ACTION"


class UnknownKeyError(InvalidActionError):
    """A key name that is neither an alias, an X keysym name nor a single character."""

    code = "UNKNOWN_KEY"


class UnknownToolError(ActionError):
    code = "UNKNOWN_TOOL"


class HumanControlError(ActionError):
    code = "HUMAN_CONTROL"


class StaleElementError(ActionError):
    """An action named an element (a number from the latest accessibility tree or marked screenshot) that is
    not in that observation, or is gone or off screen now. Take a new observation."""

    code = "STALE_ELEMENT"


class ActionTimeoutError(ActionError):
    code = "TIMEOUT"


class DesktopError(HciEnvsError):
    code = "DESKTOP_ERROR"


class DisplayStartError(DesktopError):
    code = "DISPLAY_START_FAILED"


class DesktopDiedError(DesktopError):
    code = "DESKTOP_DIED"


class DesktopLostError(DesktopError):
    """A desktop of a :class:`hci_envs.cluster.DesktopPool` is gone with its node or its actor: the episode on it
    is over, and the pool is already starting a replacement (claim another). ``node_id`` names the Ray node."""

    code = "DESKTOP_LOST"


class ForkError(DesktopError):
    """A desktop could not be forked, and nothing of the fork was left behind: ``reason`` says which part
    refused (``unavailable`` on this machine or for this desktop, ``dump failed``, ``restore failed``)."""

    code = "FORK_FAILED"


class MissingDependencyError(DesktopError, ImportError):
    code = "MISSING_DEPENDENCY"


class EnvironmentStateError(HciEnvsError):
    code = "STATE_ERROR"


class NotResetError(EnvironmentStateError):
    """A step or a tool call before the episode's first reset: a client's mistake of its own (call reset)."""

    code = "NOT_RESET"


class HandoverError(EnvironmentStateError):
    """A hand-over call that does not fit the hand-over's state: the agent asks while a person was already asked,
    a second person accepts what another has taken, a hand back with nobody holding the desktop."""

    code = "HANDOVER"


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


class ForeignOriginError(AuthError):
    """A request that changes something came from a web page of another origin (cross-site request forgery)."""

    code = "FORBIDDEN_ORIGIN"


class ModeError(HciEnvsError):
    code = "MODE_FORBIDDEN"


class ConfigError(HciEnvsError, ValueError):
    code = "CONFIG_ERROR"


class ToolDefinitionError(ConfigError, TypeError):
    """A tool's signature cannot be served (e.g. ``*args``, a parameter without a JSON-able type)."""

    code = "TOOL_DEFINITION"


class DuplicateToolError(ToolDefinitionError):
    """Two traits of one environment define a tool of the same name."""

    code = "DUPLICATE_TOOL"


class StorageError(HciEnvsError):
    """The machine has no space left for what was asked (a session's files, a snapshot, a restore)."""

    code = "NO_SPACE"

    @classmethod
    def translate(cls, exc: OSError, doing: str) -> HciEnvsError | None:
        """The typed error for a disk that is full (ENOSPC, EDQUOT), or None for any other OSError."""
        import errno

        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return None
        where = f" ({exc.filename})" if exc.filename else ""
        return cls(f"no space left on the disk{where} while {doing}: free some, or point TMPDIR elsewhere",
                   path=str(exc.filename) if exc.filename else None)


class SnapshotError(HciEnvsError):
    """A snapshot could not be taken (too large, the disk is full); the home is unchanged."""

    code = "SNAPSHOT_ERROR"


class TaskFormatError(HciEnvsError, ValueError):
    """A task file or task definition is malformed (names the file and line where there is one)."""

    code = "TASK_FORMAT"


class TaskNotFoundError(HciEnvsError, LookupError):
    """A reset named a task that the server's suite does not have."""

    code = "TASK_NOT_FOUND"


class EpisodeFormatError(HciEnvsError, ValueError):
    """An episode folder is malformed: a file is missing, a line is not JSON, an action fails the schema."""

    code = "EPISODE_FORMAT"


class EpisodeNameError(ConfigError):
    """An episode name that is not a plain folder name (a path, ``..``, a hidden name)."""

    code = "EPISODE_NAME"


class EpisodeNotFoundError(HciEnvsError, LookupError):
    """No episode of that name among those the caller may see."""

    code = "EPISODE_NOT_FOUND"


class VideoError(HciEnvsError):
    """An episode's video could not be made: no frames, an unreadable frame, the encoder failed. The episode
    itself is left as it was."""

    code = "VIDEO_ERROR"


class EnvCheckError(HciEnvsError, AssertionError):
    """An environment class does not keep the environment contract (``hci_envs.env.env_checker.check_env``)."""

    code = "ENV_CHECK_FAILED"

    @property
    def problems(self) -> list[str]:
        return list(self.details.get("problems", []))


class RfbError(HciEnvsError):
    """A VNC peer broke the RFB protocol."""

    code = "RFB_ERROR"


class TransportError(HciEnvsError):
    code = "TRANSPORT_ERROR"


class ProviderError(HciEnvsError, RuntimeError):
    """A provider could not start or reach its server. A RuntimeError too, as OpenEnv's container providers
    raise, so that code written for those handles ours."""

    code = "PROVIDER_ERROR"


class PoolError(HciEnvsError):
    """A desktop pool could not start (no Ray cluster, desktops that do not come up), or was handed a client it
    did not lend."""

    code = "POOL_ERROR"


class NoDesktopReadyError(PoolError):
    """No desktop of the pool became ready to claim within the claim's timeout; says what the pool was doing."""

    code = "NO_DESKTOP_READY"


class WireForm(NamedTuple):
    """How one error travels: its HTTP status, its OpenEnv WebSocket error code, its OpenEnv tool error type."""

    http_status: int
    ws_code: str
    tool_error: str


#: The one table from error codes to the wire. A class not listed takes its nearest listed base's form.
WIRE: dict[str, WireForm] = {
    "ERROR": WireForm(500, "EXECUTION_ERROR", "execution_error"),
    "VALIDATION_ERROR": WireForm(422, "VALIDATION_ERROR", "invalid_args"),
    "UNKNOWN_TOOL": WireForm(404, "EXECUTION_ERROR", "tool_not_found"),
    "HUMAN_CONTROL": WireForm(409, "EXECUTION_ERROR", "execution_error"),
    "STALE_ELEMENT": WireForm(409, "EXECUTION_ERROR", "execution_error"),
    "TIMEOUT": WireForm(504, "EXECUTION_ERROR", "timeout"),
    "DESKTOP_DIED": WireForm(503, "EXECUTION_ERROR", "execution_error"),
    "DESKTOP_LOST": WireForm(503, "EXECUTION_ERROR", "execution_error"),
    "DISPLAY_START_FAILED": WireForm(503, "EXECUTION_ERROR", "execution_error"),
    "FORK_FAILED": WireForm(409, "EXECUTION_ERROR", "execution_error"),
    "STATE_ERROR": WireForm(409, "EXECUTION_ERROR", "execution_error"),
    # its own code on OpenEnv's WebSocket too, where a client sees only the code and the message
    "NOT_RESET": WireForm(409, "NOT_RESET", "execution_error"),
    "HANDOVER": WireForm(409, "EXECUTION_ERROR", "execution_error"),
    "SESSION_ERROR": WireForm(409, "SESSION_ERROR", "execution_error"),
    "SESSION_NOT_FOUND": WireForm(404, "SESSION_ERROR", "execution_error"),
    "CAPACITY_REACHED": WireForm(503, "CAPACITY_REACHED", "execution_error"),
    "TOO_MANY_CALLS": WireForm(429, "SESSION_ERROR", "execution_error"),
    "UNAUTHORIZED": WireForm(401, "SESSION_ERROR", "execution_error"),
    "MODE_FORBIDDEN": WireForm(403, "EXECUTION_ERROR", "execution_error"),
    "FORBIDDEN_ORIGIN": WireForm(403, "SESSION_ERROR", "execution_error"),
    "CONFIG_ERROR": WireForm(400, "VALIDATION_ERROR", "invalid_args"),
    "SNAPSHOT_ERROR": WireForm(400, "EXECUTION_ERROR", "execution_error"),
    "NO_SPACE": WireForm(507, "EXECUTION_ERROR", "execution_error"),
    "TASK_FORMAT": WireForm(400, "VALIDATION_ERROR", "invalid_args"),
    "TASK_NOT_FOUND": WireForm(404, "VALIDATION_ERROR", "invalid_args"),
    "EPISODE_FORMAT": WireForm(400, "VALIDATION_ERROR", "invalid_args"),
    "EPISODE_NAME": WireForm(400, "VALIDATION_ERROR", "invalid_args"),
    "EPISODE_NOT_FOUND": WireForm(404, "VALIDATION_ERROR", "invalid_args"),
    "TRANSPORT_ERROR": WireForm(502, "EXECUTION_ERROR", "transport_error"),
    # the server lacks a program or an optional extra the request needs: not the caller's fault, nor a crash
    "MISSING_DEPENDENCY": WireForm(501, "EXECUTION_ERROR", "execution_error"),
}


def wire_form(exc: HciEnvsError) -> WireForm:
    """How ``exc`` travels: the form of its own code, else of its nearest base's."""
    for cls in type(exc).__mro__:
        form = WIRE.get(getattr(cls, "code", None) or "")
        if form is not None and "code" in cls.__dict__:
            return form
    return WIRE["ERROR"]


def error_class(code: str) -> type[HciEnvsError]:
    """The class registered for ``code`` (the root for a code this version does not know)."""
    return _BY_CODE.get(code, HciEnvsError)


def error_from_dict(data: dict[str, Any]) -> HciEnvsError:
    """Rebuild the exception a server described with :meth:`HciEnvsError.to_dict` (used by clients): the
    registered class of its code, with its message and details, whatever that class's constructor takes."""
    details = {k: v for k, v in data.items() if k not in ("code", "message")}
    cls = error_class(str(data.get("code")))
    err = cls.__new__(cls)
    HciEnvsError.__init__(err, str(data.get("message", "unknown error")), **details)
    if isinstance(err, InvalidActionError):
        err.field = details.get("field")
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
