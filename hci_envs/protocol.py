"""The wire types of an environment: start state, observations and state (client-safe: pydantic only)."""

from __future__ import annotations

import base64
import shlex
from pathlib import PurePath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .actions.models import ImageFormat
from .errors import require

Mode = Literal["simulation", "production"]


def _argv(command: list[str] | str) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else list(command)


class AppState(BaseModel):
    """An app the start state launches."""

    model_config = ConfigDict(extra="forbid")
    command: list[str] | str
    name: str | None = None
    env: dict[str, str] = {}
    wait_for_window: bool = True
    timeout: float = Field(15.0, gt=0, le=300)
    required: bool = Field(True, description="If the app exits, the episode ends (truncated).")
    ready: Literal["drawn", "mapped", "accessible"] = Field(
        "drawn", description="When the app counts as up: 'drawn' once its window shows more than one colour (a "
        "browser maps an empty window long before it paints), 'mapped' as soon as the window is mapped, "
        "'accessible' once drawn and its accessibility tree lists interactive elements that held still (an "
        "app that fills its tree in after it paints, as LibreOffice does).")
    ready_command: list[str] | str | None = Field(
        None, description="A command run as the agent until it exits 0 (within timeout): the app's own "
        "readiness probe, checked after its window.")

    @property
    def argv(self) -> list[str]:
        return _argv(self.command)

    @property
    def ready_argv(self) -> list[str]:
        return _argv(self.ready_command or [])

    @property
    def label(self) -> str:
        return self.name or (PurePath(self.argv[0]).name if self.argv else "app")


def parse_size(value: Any) -> int | None:
    """Bytes from ``2G``, ``512M``, ``1.5GiB``, a number of bytes, or None; ValueError for anything else."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        factor = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}.get(text[-1:], 1)
        try:
            return int(float(text[:-1] if factor > 1 else text) * factor)
        except ValueError:
            pass
    raise ValueError(f"a size is a number of bytes or like 512M or 2G, not {value!r}")


class LimitsRequest(BaseModel):
    """What a start state (an environment's, or a task's) asks its episodes' agent side may take, over the
    server's limits field by field (``serve --limit-*``; hci_envs.sandbox.limits): a field left out keeps the
    server's, ``null`` lifts that limit. A task that needs more room than the machine's defaults says so here."""

    model_config = ConfigDict(extra="forbid")
    processes: int | None = Field(None, ge=16, description="processes and threads at once")
    memory: int | str | None = Field(None, description="bytes, or like 2G (at least 64M)")
    cpu_weight: int = Field(100, ge=1, le=10_000, description="a share of the CPU against the other sessions")
    disk: int | str | None = Field(None, description="the home and the runtime folder, each, and any one file: "
                                   "bytes, or like 1G (at least 16M); by default half the memory, at most 4G")

    @field_validator("memory", "disk")
    @classmethod
    def _a_size(cls, value: int | str | None, info: Any) -> int | None:
        size = parse_size(value)
        least = 64 * 1024**2 if info.field_name == "memory" else 16 * 1024**2
        if size is not None and size < least:
            raise ValueError(f"{info.field_name} is at least {least // 1024**2}M, or null")
        return size

    def asked(self) -> dict[str, Any]:
        """The fields this request sets (the rest keep the server's)."""
        return self.model_dump(exclude_unset=True)


class StartState(BaseModel):
    """The declared start of the world that ``reset()`` restores."""

    model_config = ConfigDict(extra="forbid")
    width: int = Field(1280, ge=16, le=8192)
    height: int = Field(800, ge=16, le=8192)
    depth: Literal[16, 24] = 24
    window_manager: str | None = "openbox"
    apps: list[AppState] = []
    home_template: str | None = Field(None, description="A directory copied into the session's home on reset.")
    env: dict[str, str] = {}
    clipboard: str | None = None
    accessibility: bool = Field(True, description="Start the display's accessibility bus, so apps expose their "
                                "widgets to accessibility_tree, marks and element= (xterm and Tk expose none).")
    home_view: str | None = Field(None, description=(
        "Where the agent's processes see their home, besides where it is: a path bound to the session's home in a "
        "mount namespace of their own, the same for every process of the session (OSWorld's tasks expect "
        "/home/user). HOME is that path. Needs a server running as root."))
    limits: LimitsRequest | None = Field(None, description=(
        "Limits of this world's episodes over the server's (processes, memory, cpu_weight, disk): a task that "
        "needs more room, or should have less, says so here."))

    @field_validator("home_view")
    @classmethod
    def _home_view_is_a_home(cls, path: str | None) -> str | None:
        # /home/NAME only: the server (root) makes and mounts on it, so no folder anyone else may write, and
        # no system folder (over /etc, the agent's own ld.so.preload would run in root's setpriv)
        if path is None:
            return None
        parts = path.split("/")
        if len(parts) != 3 or parts[:2] != ["", "home"] or not parts[2] or parts[2] in (".", "..") \
                or not all(c.isalnum() or c in "._-" for c in parts[2]):
            raise ValueError(f"home_view must be /home/NAME (a plain name), not {path!r}")
        return path


class ObservationSpec(BaseModel):
    """How the screenshot in each observation is taken (or ``format=None`` for no screenshot)."""

    model_config = ConfigDict(extra="forbid")
    format: ImageFormat | None = "png"
    quality: int | None = Field(None, ge=1, le=100)
    max_side: int | None = Field(None, ge=16, le=16384)
    accessibility: bool = Field(False, description="Add the accessibility tree (boxes in the screenshot's pixels) "
                                "to each observation.")
    marks: bool = Field(False, description="Draw set-of-marks on the screenshot, numbered as the tree's elements.")
    settle: bool = Field(True, description=(
        "Take the screenshot once the screen shows the input's effect: it changed, then stayed still (its "
        "background aside: carets, clocks, animations) for a moment. Off: right after the X server took the input."))


class ImageData(BaseModel):
    """An image in an observation: base64 data, its type and geometry (``scale`` = image px per screen px)."""

    data: str
    mime_type: str
    width: int
    height: int
    scale: float = 1.0

    def bytes(self) -> bytes:
        return base64.b64decode(self.data)

    def to_pil(self) -> Any:
        """The image as a Pillow image (needs Pillow: pip install 'hci-envs[client-images]')."""
        import io

        image_module = require("PIL.Image", "client-images", "decoding screenshots")
        image = image_module.open(io.BytesIO(self.bytes()))
        image.load()
        return image

    def to_numpy(self) -> Any:
        """The image as an (height, width, 3) uint8 RGB array (needs numpy and Pillow)."""
        np = require("numpy", "client-images", "decoding screenshots to arrays")
        return np.asarray(self.to_pil().convert("RGB"))


class Observation(BaseModel):
    """What ``reset`` and ``step`` return."""

    model_config = ConfigDict(extra="allow")
    screenshot: ImageData | None = None
    text: str = ""
    data: dict[str, Any] | list[Any] | None = None
    images: list[ImageData] = []
    #: A step given a list (a batch): each item's outcome in order, ``{"index", "status": "ok" | "error" |
    #: "not_run", "text", "data", "images": [indexes into images], "error"}``; the batch stops at the first
    #: item that fails, and the items after it are ``not_run``.
    outcomes: list[dict[str, Any]] | None = None
    accessibility_tree: dict[str, Any] | None = None
    marks: list[dict[str, Any]] | None = None
    error: dict[str, Any] | None = None
    reward: float | None = None
    done: bool = False
    truncated: bool = False
    truncated_reason: str | None = None
    metadata: dict[str, Any] = {}


class EnvState(BaseModel):
    """The control plane's view of an episode."""

    model_config = ConfigDict(extra="allow")
    episode_id: str | None = None
    step_count: int = 0
    seed: int | None = Field(None, description="The seed the episode was reset with (None: none given).")
    task: str | None = Field(None, description="The id of the task the episode was reset into, if any.")
    screen_width: int = 0
    screen_height: int = 0
    mode: Mode = "simulation"
    done: bool = False
    truncated_reason: str | None = None
    session_id: str | None = None
    mcp_url: str | None = None
    agent_token: str | None = None
    vnc_url: str | None = None
    vnc_view_url: str | None = None
    isolation: str = Field("none", description='"uid": the agent side runs as an account of its own; "none": as '
                                                'the server\'s user (no containment).')
    limits: dict[str, Any] | None = Field(None, description="What the kernel lets the agent side take (processes "
                                          "and threads, memory in bytes, CPU weight) and what enforces it.")
    network: dict[str, Any] | None = Field(None, description="What the agent side may connect to (policy none, "
                                           "allowlist or open; the allowed destinations) and what enforces it.")
    spare: dict[str, Any] | None = Field(None, description="The spare desktop a reset swaps in: its state "
                                         "(ready, preparing, idle, off) and why it is off; None without one.")
    human: dict[str, Any] | None = Field(None, description="The agent's hand-over to a person (ask_human): status "
                                         "none, requested, held, handed_back or unanswered, and the current or "
                                         "last one's reason, person, note and actions.")
    supervision: dict[str, Any] | None = Field(None, description="Propose and accept: whether a person decides on "
                                               "each of the agent's input actions before it runs, the proposal "
                                               "waiting now and the last decision.")


