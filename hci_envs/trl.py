"""Desktops for TRL's ``GRPOTrainer(environment_factory=...)``, with no glue.

    from hci_envs.trl import TrlDesktopEnv, task_dataset
    trainer = GRPOTrainer(model=..., train_dataset=task_dataset(), environment_factory=TrlDesktopEnv, ...)

TRL makes instances as it needs them and reuses them; before each rollout it calls ``reset(**row)`` with the
dataset row, offers the instance's public methods to the model as tools (their type hints and Google-style
docstrings become the tool schemas), and scores each finished rollout with ``get_reward()``. Here:

* the tools are generated from the action vocabulary (one per canonical action, typed, documented); a tool
  that fails raises, so TRL counts it in its tool-failure metrics, and the model reads the error;
* ``reset(**row)`` starts the row's ``task`` (an id of the server's suite, or a task spec) or its
  ``instruction``; it returns the instruction (when the row carries no prompt) and the first screen;
* ``get_reward()`` runs the task's checker on the server (where the answers are), or gives None (ignored by
  TRL) for a row without a task;
* every instance is a session of one server per configuration, started on first use (``hci-envs serve``
  locally, or the one at ``url``), and every session and server is closed when the process exits (TRL closes
  nothing).

Screenshots reach the model as image blocks, unless the trainer's processing class takes no images (a
tokenizer): then text only, said once. ``TrlDesktopEnv.configure(...)`` makes a subclass with other settings
(environment, apps, a server URL, ``images``), named after them and pickled by them (for spawned workers);
:func:`environment_factories` makes the dict of TRL's multi-environment
mode; :class:`AsyncTrlDesktopEnv` has the same tools as coroutines. Needs ``hci-envs[trl]``.
"""

from __future__ import annotations

import asyncio
import atexit
import copyreg
import inspect
import io
import json
import re
import secrets
import sys
import threading
import types
import typing
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar, NamedTuple, get_args, get_origin

from pydantic import BaseModel

from .actions import ACTIONS
from .client import HciEnvClient
from .errors import ConfigError, EnvironmentStateError, HciEnvsError, TransportError, error_from_dict

#: Actions a model gets as tools by default: all but the low-level halves (mouse_down/up, key_down/up), which
#: leave input held when a rollout ends mid-way, and screen_size, which the first screen tells.
DEFAULT_TOOLS = ("screenshot", "mouse_move", "click", "drag", "scroll", "type_text", "key", "hold_key", "wait",
                 "cursor_position", "clipboard_get", "clipboard_set")


class ToolCallError(HciEnvsError):
    """A tool call failed (bad arguments, an action the desktop refused): TRL counts it as a failed call."""

    code = "TOOL_CALL_FAILED"


# -- the tools, generated from the vocabulary --------------------------------------------------------------
def _plain(hint: Any) -> Any:
    """A type hint transformers' schema builder reads: no Annotated, no pydantic models (as dicts)."""
    origin = get_origin(hint)
    if origin is typing.Annotated:
        return _plain(get_args(hint)[0])
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return dict
    if origin in (typing.Union, types.UnionType):
        args = tuple(_plain(a) for a in get_args(hint))
        return typing.Union[args]  # noqa: UP007 - built from a tuple
    if origin in (list, tuple) and get_args(hint):
        args = tuple(_plain(a) for a in get_args(hint))
        return list[args[0]] if origin is list else tuple[args]
    return hint


def _tool_signature(model: type[BaseModel]) -> tuple[inspect.Signature, str]:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    lines = []
    for name, info in model.model_fields.items():
        if name == "type":
            continue
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=_plain(info.annotation)))
        description = " ".join((info.description or name.replace("_", " ")).split())
        lines.append(f"    {name}: {description}")
    doc = inspect.cleandoc(model.__doc__ or model.__name__).split("\n\n")[0]
    if lines:
        doc += "\n\nArgs:\n" + "\n".join(lines)
    return inspect.Signature(params, return_annotation=Any), doc


#: What a model that sees no images may get of the screen with each result (``configure(text_view=...)``).
TEXT_VIEWS = ("accessibility", "none")
#: The most elements of the accessibility tree in a text view: a prompt's worth (a few thousand tokens).
TEXT_VIEW_NODES = 150


def _make_tool(name: str, asynchronous: bool) -> Any:
    model = ACTIONS[name]
    signature, doc = _tool_signature(model)

    if asynchronous:
        async def tool(self: TrlDesktopEnv, **arguments: Any) -> Any:
            # Handed to the desktop's one worker thread before the first await: TRL gathers a rollout's calls
            # as tasks, which start in the order they were made, so the calls reach the desktop in that order.
            return await asyncio.get_running_loop().run_in_executor(self._worker(), self._call, name, arguments)
    else:
        def tool(self: TrlDesktopEnv, **arguments: Any) -> Any:
            return self._call(name, arguments)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = doc
    tool.__signature__ = signature  # type: ignore[attr-defined]
    tool.__annotations__ = {p.name: p.annotation for p in signature.parameters.values() if p.name != "self"}
    tool.__annotations__["return"] = Any
    return tool


# -- one server per configuration, for every instance -------------------------------------------------------
class _Server:
    """A server shared by the instances of one configuration: started on first use, stopped at exit."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.url: str | None = config.get("url")
        self.control_token: str | None = config.get("control_token")
        self.provider: Any = None
        self.clients: weakref.WeakSet[HciEnvClient] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.draws: dict[str, int] = {}  # the tasks drawn from each split so far (the environment's own data)
        self.sizes: dict[str, int] = {}

    def client(self) -> HciEnvClient:
        with self.lock:
            if self.url is None:
                from .providers import LocalProvider

                self.control_token = secrets.token_urlsafe(32)
                # +1: the server's default session counts too (it stays without a desktop: lazy)
                options = {"max_sessions": self.config["max_sessions"] + 1, "lazy_default_session": True,
                           "control_token": self.control_token, **self.config.get("serve", {})}
                if self.config.get("apps"):
                    options["apps"] = self.config["apps"]
                self.provider = LocalProvider(self.config["env"], **options)
                self.url = self.provider.start(timeout=120, headers={"Authorization": f"Bearer {self.control_token}"})
            client = HciEnvClient(self.url, timeout=self.config["timeout"], control_token=self.control_token)
            self.clients.add(client)
        return client.connect()

    def draw(self, split: str, group: int) -> int:
        """The index of the next task of ``split`` for a rollout: each task in turn, ``group`` rollouts in a
        row on the same one (GRPO compares a group's rollouts of one prompt), around again after the last."""
        with self.lock:
            drawn = self.draws.get(split, 0)
            self.draws[split] = drawn + 1
        return (drawn // group) % self._split_size(split)

    def _split_size(self, split: str) -> int:
        if split not in self.sizes:
            from .client import HciEnvClient

            size = HciEnvClient(self.url, control_token=self.control_token, timeout=60).num_tasks(split)
            if size < 1:
                raise ConfigError(f"split {split!r} of the server's tasks is empty", field="split")
            self.sizes[split] = size
        return self.sizes[split]

    def close(self) -> None:
        with self.lock:
            for client in list(self.clients):
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing at exit: the server goes next anyway
                    pass
            if self.provider is not None:
                self.provider.stop()
                self.provider, self.url = None, self.config.get("url")


_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()


def _server(config: dict[str, Any]) -> _Server:
    key = json.dumps(config, sort_keys=True, default=str)
    with _servers_lock:
        if key not in _servers:
            _servers[key] = _Server(config)
        return _servers[key]


@atexit.register
def close_all() -> None:
    """Close every session and stop every server this process started (TRL never closes environments)."""
    with _servers_lock:
        servers = list(_servers.values())
    for server in servers:
        server.close()


# -- configured variants pickle by their settings -----------------------------------------------------------
class _Configurable(type):
    """The metaclass of :class:`TrlDesktopEnv`. A class of a module pickles by its name, as any class does; a
    variant made by :meth:`~TrlDesktopEnv.configure` has no name to be found by, and pickles as its base and
    settings instead, so it reaches a trainer's spawned workers (TRL's ``AsyncGRPOTrainer``) as it is."""


def _reduce_class(cls: _Configurable) -> Any:
    made = cls.__dict__.get("_configured_as")
    return cls.__qualname__ if made is None else (_configured, made)


copyreg.pickle(_Configurable, _reduce_class)
_configured_classes: dict[str, type[TrlDesktopEnv]] = {}
_configured_lock = threading.Lock()


def _configured(base: type[TrlDesktopEnv], name: str, config: dict[str, Any],
                tools: tuple[str, ...] | None) -> type[TrlDesktopEnv]:
    """The variant of ``base`` with these settings: one class per process for the same ones, however often it
    is made or unpickled (TRL tells environments apart by their class)."""
    key = json.dumps([base.__module__, base.__qualname__, id(base), name, config, tools], sort_keys=True,
                     default=str)
    with _configured_lock:
        if key not in _configured_classes:
            cls = types.new_class(name, (base,), {"tools": tools},
                                  lambda ns: ns.update({"config": config, "__module__": base.__module__}))
            cls._configured_as = (base, name, config, tools)
            _configured_classes[key] = cls
        return _configured_classes[key]


def _variant_name(base: type, config: dict[str, Any]) -> str:
    """A configured variant's own name (TRL names its reward column after it): the base's, the environment's,
    the apps' and "text" for a text-only one, e.g. ``TrlDesktopEnv_workstation_mousepad_text``."""
    def program(app: Any) -> str:  # an app is a command line, an argv, or a start state's {"command": ...}
        command = app.get("command", "") if isinstance(app, dict) else app
        first = command[0] if isinstance(command, (list, tuple)) and command else str(command).split(" ")[0]
        return str(first).rsplit("/", 1)[-1]

    parts = [base.__name__, str(config["env"]), *(program(app) for app in config.get("apps") or ())]
    if config.get("images") is False:
        parts.append("text")
    return "_".join(re.sub(r"[^A-Za-z0-9]+", "_", part).strip("_") for part in parts if part)


# -- the environment ---------------------------------------------------------------------------------------
class TrlDesktopEnv(metaclass=_Configurable):
    """One desktop (a session of a shared server) for each rollout TRL runs at once; see the module."""

    #: The configuration; change it with :meth:`configure`.
    config: ClassVar[dict[str, Any]] = {
        "env": "workstation", "apps": None, "url": None, "control_token": None, "max_sessions": 8,
        "timeout": 120.0, "images": "auto", "text_view": "accessibility", "split": None, "group_size": None,
        "serve": {},
    }
    _asynchronous: ClassVar[bool] = False

    def __init_subclass__(cls, tools: tuple[str, ...] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if tools is not None:
            cls._install_tools(tools)

    @classmethod
    def _install_tools(cls, names: tuple[str, ...]) -> None:
        unknown = [n for n in names if n not in ACTIONS]
        if unknown:
            raise ConfigError(f"no action named {', '.join(unknown)}; the actions are {', '.join(ACTIONS)}",
                              field="tools")
        for name in ACTIONS:  # a subclass may offer fewer tools than its base: hide the others
            if name not in names and name in dir(cls):
                setattr(cls, name, None)
        for name in names:
            setattr(cls, name, _make_tool(name, cls._asynchronous))

    @classmethod
    def configure(cls, name: str | None = None, *, env: str | None = None, apps: list[str] | None = None,
                  url: str | None = None, control_token: str | None = None, max_sessions: int | None = None,
                  images: bool | str | None = None, tools: tuple[str, ...] | None = None,
                  timeout: float | None = None, split: str | None = None, group_size: int | None = None,
                  text_view: str | None = None, **serve: Any) -> type[TrlDesktopEnv]:
        """A subclass with other settings: ``env`` (an installed environment, ``module:Class`` or
        ``file.py:Class``), ``apps`` (commands started on the desktop), ``url`` and ``control_token`` (use that
        server instead of starting one), ``max_sessions`` (the most rollouts at once), ``images`` (False: text
        results only, for models without vision; True: screenshots whatever the model; "auto", the default:
        text when the trainer's processing class takes no images), ``text_view`` (what a model that sees no
        images gets of the screen with every result: "accessibility", the default, the accessibility tree as
        an outline of numbered elements; "none": nothing), ``tools`` (action names), ``split`` (the
        environment owns the data: a row without a task draws the next task of this split of the server's
        task API, as TRL's dataset-less mode needs), ``group_size`` (how many rollouts in a row share a drawn
        task; default the trainer's ``num_generations``), and any other ``serve`` option
        (``size=(1024, 768)``, ``tasks="my_tasks.jsonl"``)."""
        if images not in (None, True, False, "auto"):
            raise ConfigError(f"images is True, False or 'auto', not {images!r}", field="images")
        if text_view not in (None, *TEXT_VIEWS):
            raise ConfigError(f"text_view is one of {', '.join(map(repr, TEXT_VIEWS))}, not {text_view!r}",
                              field="text_view")
        if group_size is not None and (isinstance(group_size, bool) or not isinstance(group_size, int)
                                       or group_size < 1):
            raise ConfigError(f"group_size is a positive integer, not {group_size!r}", field="group_size")
        given = {"env": env, "apps": apps, "url": url, "control_token": control_token, "max_sessions": max_sessions,
                 "images": images, "timeout": timeout, "split": split, "group_size": group_size,
                 "text_view": text_view}
        config = {**cls.config, **{k: v for k, v in given.items() if v is not None}}
        options = serve.pop("serve", None) or {}  # serve={...} too, beside serve options as keywords
        if not isinstance(options, dict):
            raise ConfigError(f"serve is a dict of serve options, not {options!r}", field="serve")
        config["serve"] = {**cls.config["serve"], **options, **serve}
        return _configured(cls, name or _variant_name(cls, config), config, tools)

    def __init__(self) -> None:
        settings = _settings_for(type(self))
        self._images, self._group = settings.images, settings.group
        self._client = _server(self.config).client()
        self._lock = threading.Lock()
        #: Where to watch this desktop (its VNC view in a browser) and reach its tools (MCP): set at the first
        #: reset, and printed then, once per desktop.
        self.vnc_view_url: str | None = None
        self.mcp_url: str | None = None
        self._task: Any = None
        self._calls: ThreadPoolExecutor | None = None
        self._calls_lock = threading.Lock()  # not self._lock, which a running call holds: never block the loop

    def _worker(self) -> ThreadPoolExecutor:
        """The one thread this desktop's async calls run on, in the order they were submitted."""
        with self._calls_lock:
            if self._calls is None:
                self._calls = ThreadPoolExecutor(1, thread_name_prefix="hci-envs-trl")
            return self._calls

    def _after_calls(self, fn: Any) -> Any:
        """``fn()`` once every async call submitted before it has finished (it runs after them on the
        worker); at once when there have been none."""
        calls = self._calls
        return fn() if calls is None else calls.submit(fn).result()

    # -- what TRL calls ------------------------------------------------------------------------------
    def reset(self, **row: Any) -> str | list[dict[str, Any]] | None:
        """Called by the trainer before each rollout with the dataset row (never by the model): the row's
        ``task`` (an id or a spec), ``split`` and ``index`` (a task by its place in the server's task API), or
        ``instruction``; with none of them and a configured ``split``, the split's next task (the environment
        owns the data). Returns the instruction when the row's prompt does not carry it, and the first screen."""
        task, instruction = row.get("task"), row.get("instruction")
        split, index = row.get("split"), row.get("index")
        if task is None and instruction is None and split is None and self.config["split"] is not None:
            split = self.config["split"]
            index = _server(self.config).draw(split, self._group)
        by_position = split is not None

        def reset() -> Any:
            with self._lock:
                if by_position:
                    return self._client.reset(split=split, index=index)
                return self._client.reset(task=task) if task is not None else self._client.reset()

        try:
            result = self._after_calls(reset)
        except (EnvironmentStateError, TransportError):
            # The server closed this desktop's session after its idle deadline (the trainer spent longer than
            # that between rollouts, or left one unfinished): the rollout starts on a new session.
            self._reconnect()
            result = self._after_calls(reset)
        obs = result.observation
        shown = (obs.metadata or {}).get("task") or {}
        self._task = shown.get("id") if by_position else task
        if self.vnc_view_url is None and self.mcp_url is None:
            self._show_urls()
        if instruction is None and self._task is not None:
            instruction = shown.get("instruction")
        prompt = row.get("prompt")
        said = bool(prompt) and bool(prompt[-1].get("content")) if isinstance(prompt, list) else bool(prompt)
        content = self._content(instruction if instruction and not said else "", obs)
        # TRL appends what this returns to the prompt's last message as it is: apart from a prompt that says
        # something, as it is for the empty one of TRL's dataset-less mode
        return "\n\n" + content if isinstance(content, str) and said else content

    def get_reward(self) -> float | None:
        """The task's score from its checker (on the server); None without a task (TRL ignores it). The score
        is the finished episode's: it is asked once this desktop's calls have returned, and the server runs
        the checker once the world has caught up with them (a command typed into a terminal has finished, the
        screen has settled: see ``Environment.catch_up``)."""
        if self._task is None:
            return None
        return self._after_calls(self._score)

    def _score(self) -> float:
        with self._lock:
            return float(self._client.score()["score"])

    def _reconnect(self) -> None:
        with self._lock:
            old, self._client = self._client, _server(self.config).client()
            self.vnc_view_url = self.mcp_url = None
        try:
            old.close()
        except HciEnvsError:
            pass

    def _show_urls(self) -> None:
        try:
            with self._lock:
                state = self._client.state()
        except HciEnvsError:
            return  # the URLs are a convenience: a rollout goes on without them
        self.vnc_view_url, self.mcp_url = state.vnc_view_url, state.mcp_url
        where = ", ".join(f"{label} {url}" for label, url in (("watch:", self.vnc_view_url),
                                                                ("tools (MCP):", self.mcp_url)) if url)
        if where:
            print(f"[hci-envs] {type(self).__name__} desktop {state.episode_id or ''}: {where}".replace("  ", " "),
                  file=sys.stderr, flush=True)

    def _text_view(self) -> str:
        """The screen as text, for a model that sees no images (``text_view``): the accessibility tree's outline,
        the elements on screen numbered as ``element=`` takes them, at most TEXT_VIEW_NODES of them; nothing when
        the apps on screen expose no tree."""
        if self.config.get("text_view", "accessibility") != "accessibility":
            return ""
        with self._lock:
            result = self._client.step({"type": "accessibility_tree", "compact": True,
                                        "max_nodes": TEXT_VIEW_NODES})
        tree = result.observation.data
        if not isinstance(tree, dict) or not tree.get("nodes"):
            return ""  # apps that expose nothing (xterm, Tk): no view rather than an empty one
        return (result.observation.text or "").strip()

    # -- tools -------------------------------------------------------------------------------------------
    def _call(self, tool: str, arguments: dict[str, Any]) -> Any:
        with self._lock:
            result = self._client.step({"tool": tool, "arguments": arguments})
        obs = result.observation
        if obs.error:
            raise error_from_dict(obs.error) if isinstance(obs.error, dict) and obs.error.get("code") \
                else ToolCallError(str(obs.error))
        text = obs.text or f"{tool}: done"  # what the recorder keeps as an agent action's result, for SFT data
        if result.done:
            text += "\nThe episode has ended."
        return self._content(text, obs)

    def _content(self, text: str, obs: Any) -> str | list[dict[str, Any]] | None:
        shot = getattr(obs, "screenshot", None)
        if not self._images:
            return "\n\n".join(part for part in (text.strip(), self._text_view()) if part) or None
        if shot is None:
            return text.strip() or None
        if shot.scale != 1.0:
            text += f"\n(screen shown at scale {shot.scale:g}: pass scale={shot.scale:g} with coordinates read off it)"
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text.strip()}] if text.strip() else []
        blocks.append({"type": "image", "image": _image(shot)})
        return blocks


class _TrainerSettings(NamedTuple):
    """What an environment class takes from the trainer that makes it: whether its model sees images, and how
    many rollouts form a group (GRPO's ``num_generations``)."""

    images: bool
    group: int


_chosen: dict[type, _TrainerSettings] = {}


def _settings_for(cls: type[TrlDesktopEnv]) -> _TrainerSettings:
    """``cls``'s settings as the trainer making it needs them. ``images`` "auto" (the default) is whether the
    trainer's processing class can show images to its model: one with no image processor (a tokenizer: a
    text-only model) would fail inside the chat template on an image block, so such a model gets text, said
    once. ``group_size`` None is the trainer's ``num_generations``. Read when the trainer makes its first
    instance; outside a trainer, what a trainer chose before, else screenshots and groups of one."""
    trainer = _trainer_on_stack()
    before = _chosen.get(cls)
    if trainer is None:
        found = before or _TrainerSettings(True, 1)
    else:
        processing_class, generations = trainer
        images = processing_class is None or getattr(processing_class, "image_processor", None) is not None
        found = _TrainerSettings(images, max(1, int(generations or 1)))
        if before is None and not images and cls.config["images"] == "auto":
            print(f"[hci-envs] {cls.__name__}: the trainer's {type(processing_class).__name__} takes no images, so "
                  "observations are text; configure(images=True) to send screenshots anyway", file=sys.stderr,
                  flush=True)
        _chosen[cls] = found
    setting, group = cls.config["images"], cls.config.get("group_size")
    return _TrainerSettings(found.images if setting == "auto" else bool(setting), group or found.group)


def _trainer_on_stack() -> tuple[Any, int | None] | None:
    """The processing class and ``num_generations`` of the trainer whose code is making an environment (TRL
    calls the factory from its own methods), or None when no trainer is on the stack."""
    frame = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if owner is not None and _is_trainer(owner):
            # GRPOTrainer.__init__ makes its first instance before it keeps these: its locals have them
            processing_class = frame.f_locals.get("processing_class")
            if processing_class is None:
                processing_class = getattr(owner, "processing_class", None)
            args = frame.f_locals.get("args") or getattr(owner, "args", None)
            generations = getattr(owner, "num_generations", None) or getattr(args, "num_generations", None)
            return processing_class, generations
        frame = frame.f_back
    return None


def _is_trainer(owner: Any) -> bool:
    return any(klass.__module__.startswith(("trl.", "transformers.")) and klass.__name__.endswith("Trainer")
               for klass in type(owner).__mro__)


def _image(shot: Any) -> Any:
    from .errors import require

    image_module = require("PIL.Image", "trl", "screenshots as TRL image blocks")
    image = image_module.open(io.BytesIO(shot.bytes()))
    image.load()
    return image.convert("RGB")


class AsyncTrlDesktopEnv(TrlDesktopEnv):
    """The same tools as coroutines: TRL gathers a rollout's async tool calls instead of running them one by
    one. The calls of one desktop still run one at a time and in the order TRL made them, on a worker thread
    of the desktop's own (the event loop is never blocked); ``reset`` and ``get_reward`` wait for them, and
    ``get_reward`` is a coroutine too (both of TRL's trainers await it), so other rollouts go on while a checker
    runs."""

    _asynchronous = True

    async def get_reward(self) -> float | None:  # type: ignore[override]
        if self._task is None:
            return None
        # on the desktop's one worker: after every call submitted before it, as the sync form's _after_calls
        return await asyncio.get_running_loop().run_in_executor(self._worker(), self._score)


TrlDesktopEnv._install_tools(DEFAULT_TOOLS)
AsyncTrlDesktopEnv._install_tools(DEFAULT_TOOLS)


def tool_schemas(env_class: type[TrlDesktopEnv] | None = None) -> list[dict[str, Any]]:
    """The tools of ``env_class`` as TRL shows them to the model (transformers' ``get_json_schema`` of each tool
    method, in TRL's order): what an SFT dataset must carry for its conversations to match GRPO's prompts."""
    from .errors import require

    get_json_schema = require("transformers.utils", "trl", "tool schemas as TRL renders them").get_json_schema
    cls = env_class or TrlDesktopEnv
    return [get_json_schema(fn) for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


def environment_factories(**configurations: dict[str, Any]) -> dict[str, type[TrlDesktopEnv]]:
    """TRL's multi-environment mode: ``{name: environment class}`` from ``name=dict(configure options)``; each
    dataset row picks one with its ``environment`` column."""
    if not configurations:
        raise ConfigError("name at least one environment: environment_factories(editor={'apps': ['mousepad']})")
    return {name: TrlDesktopEnv.configure(f"TrlDesktopEnv_{name}", **options)
            for name, options in configurations.items()}


def task_dataset(tasks: Any = None, *, repeat: int = 1, environment: str | None = None) -> Any:
    """A TRL dataset of tasks: one row per task (``repeat`` times), with the instruction as the prompt and the
    task's id in ``task`` (the answers stay on the server). ``tasks``: a task file or folder, or TaskSpecs;
    default the built-in suite (readable by the server's user only, as this process must then be)."""
    from .errors import require
    from .tasks import BUILTIN, load_tasks

    datasets = require("datasets", "trl", "building a task dataset")
    specs = load_tasks(tasks or BUILTIN) if tasks is None or isinstance(tasks, str) or hasattr(tasks, "is_dir") \
        else list(tasks)
    rows = []
    for _ in range(repeat):
        for spec in specs:
            row = {"prompt": [{"role": "user", "content": spec.instruction}], "task": spec.id}
            if environment is not None:
                row["environment"] = environment
            rows.append(row)
    return datasets.Dataset.from_list(rows)

