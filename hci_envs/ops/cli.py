"""The ``hci-envs`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .. import plugins
from ..errors import ConfigError, HciEnvsError

DEFAULT_ENV = plugins.DEFAULT_ENV

_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {}


def command(name: str) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    def register(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        _COMMANDS[name] = fn
        return fn

    return register


def parse_size(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"size must look like 1280x800, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        hint = " (is another server running? pick another --port)" if exc.errno in (98, 48) else ""
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}{hint}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _app(given: str) -> Any:
    """An --app: a command line, or an app's start state as a JSON object (``{"command": ..., "ready": ...}``)."""
    if not given.lstrip().startswith("{"):
        return {"command": given}
    try:
        return json.loads(given)
    except ValueError as exc:
        raise ConfigError(f"--app {given!r} starts like a JSON object but is not one: {exc}", field="app") from None


def serve_config(args: argparse.Namespace, port: int, osworld_port: int | None = None) -> Any:
    """The ServerConfig of ``hci-envs serve ARGS`` on ``port`` (the tests build the server in process with it),
    with OSWorld's guest API on ``osworld_port`` if given."""
    from ..server.config import ServerConfig

    env_class = plugins.load_env_class(args.env)
    overrides: dict[str, Any] = {}
    if args.size:
        overrides["width"], overrides["height"] = args.size
    if args.app:
        overrides["apps"] = [_app(cmd) for cmd in args.app]
    if getattr(args, "home_view", None):
        overrides["home_view"] = args.home_view
    if getattr(args, "home_template", None):
        overrides["home_template"] = args.home_template
    env_kwargs: dict[str, Any] = {}
    if overrides:
        env_kwargs["start_state"] = {**env_class.start_state.model_dump(), **overrides}
    if args.desktop != "xvfb":
        env_kwargs["desktop"] = args.desktop
    if getattr(args, "fork_share_memory", None) is not None:  # read by every forkable desktop it starts
        from ..fork.sharing import SETTING

        os.environ[SETTING] = "1" if args.fork_share_memory else "0"
    observation: dict[str, Any] = {}
    if args.observation_format:
        observation["format"] = None if args.observation_format == "none" else args.observation_format
    if args.settle is not None:
        observation["settle"] = args.settle
    if observation:
        env_kwargs["observation"] = observation
    env_kwargs["spare"] = True if args.spare is None else args.spare
    for option in ("human_answer_within", "human_hold_for", "decide_within"):  # people in the loop
        if getattr(args, option, None) is not None:
            env_kwargs[option] = getattr(args, option)
    if getattr(args, "supervise", False):
        env_kwargs["supervise"] = True
    if getattr(args, "pause_clock_for_people", False):
        env_kwargs["pause_clock_for_people"] = True
    limits = {"memory": getattr(args, "limit_memory", None), "processes": getattr(args, "limit_processes", None),
              "cpu_weight": getattr(args, "limit_cpu_weight", None), "disk": getattr(args, "limit_disk", None)}
    from ..sandbox.limits import Limits

    if getattr(args, "no_limits", False):
        if any(value is not None for value in limits.values()):
            raise ConfigError("--no-limits and --limit-* contradict each other")
        env_kwargs["limits"] = Limits.none()
    elif any(value is not None for value in limits.values()):
        env_kwargs["limits"] = Limits.from_options({k: v for k, v in limits.items() if v is not None})
    allow = getattr(args, "allow", None) or []
    network = getattr(args, "network", None)
    if allow and network not in (None, "allowlist"):
        raise ConfigError(f"--allow and --network {network} contradict each other (--allow is the allowlist)")
    if allow or network is not None:
        from ..sandbox.network import NetworkPolicy

        env_kwargs["network"] = NetworkPolicy.make(allow or network)
    control_token, agent_token = _secret_options(args)
    return ServerConfig.from_env(
        host=args.host, port=port, env_class=env_class, env_kwargs=env_kwargs, mode=args.mode,
        max_sessions=args.max_sessions, idle_timeout=args.idle_timeout, orphan_timeout=args.orphan_timeout,
        control_token=control_token, agent_token=agent_token, agent_tokens=args.agent_tokens or None,
        public_url=args.public_url, vnc=not args.no_vnc and args.desktop != "fake", vnc_port=args.vnc_port,
        takeover_timeout=args.takeover_timeout, episodes_dir=args.episodes_dir, tasks=args.tasks,
        action_mode=args.action_mode, isolation=args.isolation, max_agent_processes=args.max_agent_processes,
        lazy_default_session=args.lazy_default_session or None,
        osworld_port=osworld_port, osworld_owner=getattr(args, "osworld_owner_uid", None),
    )


@command("serve")
def serve(args: argparse.Namespace) -> int:
    from ..desktop.allocator import one_heap

    one_heap()  # before any thread starts: a long-running server's memory stays flat over its resets
    import uvicorn

    from ..server.app import create_app

    sock = _bind(args.host, args.port)
    sockets = [sock]
    gate_secret = os.environ.get("HCI_ENVS_OSWORLD_TOKEN", "")
    if args.osworld_gate_port is not None:
        if not gate_secret:
            raise ConfigError("--osworld-gate-port needs its secret in HCI_ENVS_OSWORLD_TOKEN (never on the command "
                              "line): the gate runs commands on the desktop for whoever knows it")
        if args.osworld_port is None:
            args.osworld_port = 0  # the gate leads to the guest API
    if args.osworld_port is not None:
        if args.osworld_port and args.osworld_port == sock.getsockname()[1]:
            raise ConfigError("--osworld-port must be another port than --port")
        sockets.append(_bind("127.0.0.1", args.osworld_port))  # loopback only: see hci_envs.server.osworld_guest
    config = serve_config(args, sock.getsockname()[1],
                          sockets[1].getsockname()[1] if len(sockets) > 1 else None)
    gate = None
    if args.osworld_gate_port is not None:
        from ..providers.tunnel import gate as osworld_gate

        gate = osworld_gate(_bind(args.host, args.osworld_gate_port), gate_secret, config.osworld_port).start()
        config.osworld_gate = f"{args.host}:{gate.port}"
    env_class = config.env_class
    config.on_ready = lambda server: _print_ready(server, sys.stdout)
    app = create_app(config)
    if args.tasks:  # before anything starts: a checker that cannot run scores nothing
        app.hci.task_suite.require_checkers()
    isolation = app.hci.isolation
    if (args.control_token or args.agent_token) and isolation.mode == "uid":
        raise ConfigError("secrets on the command line are readable by every local user, agents included "
                          "(/proc/PID/cmdline): pass them in HCI_ENVS_CONTROL_TOKEN / HCI_ENVS_AGENT_TOKEN or "
                          "with --control-token-file / --agent-token-file")
    if args.exit_with_stdin:
        threading.Thread(target=_exit_on_stdin_eof, name="stdin-watch", daemon=True).start()
    print(f"hci-envs: starting {env_class.__name__} on {config.base_url()} ...", flush=True)
    if isolation.mode == "uid":
        print(f"hci-envs: isolation: uid (each session's agent side runs as an account of its own; "
              f"{isolation.accounts} agent accounts)", flush=True)
    else:
        print(f"hci-envs: WARNING: isolation: none: {isolation.reason}. Agents run as this server's user and can "
              "read its secrets, signal it and reach other sessions; loopback only.", flush=True)
    from ..server.guards import header_timeout_protocol

    protocol = header_timeout_protocol(config.header_timeout)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level=args.log_level, access_log=args.log_level == "debug", lifespan="on",
                       ws_max_size=64 * 1024 * 1024, http=protocol or "auto", timeout_keep_alive=5,
                       # observations are base64 images, which deflate cannot shrink: compressing them only
                       # costs both ends time (measured: bench/bench_house.py)
                       ws_per_message_deflate=False,
                       # the guards ask the kernel who owns the connection the client address names: a header
                       # may not name it (uvicorn would take X-Forwarded-For from a loopback client)
                       proxy_headers=False)
    )
    from ..server.path_token import redact_logs

    redact_logs()  # uvicorn.Config has set up its handlers: no control token in a URL path reaches them
    try:
        server.run(sockets=sockets)
    finally:
        if gate is not None:
            gate.stop()
    return 0 if server.started else 1


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    return value.strip().lower() not in ("0", "false", "no", "off")


@command("image")
def image(args: argparse.Namespace) -> int:
    from . import images

    if args.action == "build":
        offline = not args.online
        base = args.base or (images.BASE_OS if offline else images.PUBLIC_BASE)
        if args.env:
            # The base is rebuilt each time (Docker's layer cache makes that quick when nothing changed), so
            # an environment's image never carries an older hci-envs than the source.
            images.build_base(base=base, offline=offline, mirror=args.mirror)
            images.build_env_image(args.env, args.tag)
        else:
            images.build_all(for_tests=args.for_tests, offline=offline, mirror=args.mirror, base=base)
    elif args.action == "base-os":
        images.build_base_os(mirror=args.mirror)
    elif args.action == "wheelhouse":
        images.build_wheelhouse()
    return 0


def _exit_on_stdin_eof() -> None:
    """Shut down gracefully once stdin closes: the process that started us is gone."""
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _secret_options(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The secrets given as options, from the command line or from files (``--*-token-file``)."""

    def read(path: str | None, option: str) -> str | None:
        if path is None:
            return None
        try:
            token = open(path, encoding="utf-8").read().strip()  # noqa: SIM115
        except OSError as exc:
            raise ConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None
        if not token:
            raise ConfigError(f"{option}: {path} is empty")
        return token

    control = args.control_token or read(args.control_token_file, "--control-token-file")
    agent = args.agent_token or read(args.agent_token_file, "--agent-token-file")
    return control, agent


def _print_ready(server: Any, out: Any) -> None:
    session = server.sessions.default()
    state = session.env.state
    started = session.env.desktop is not None
    lines = [f"hci-envs: {'desktop ready' if started else 'ready; the default desktop starts on first use'} "
             f"({state.screen_width}x{state.screen_height})"]
    lines.append(f"  {'MCP endpoint:':<27}{server.mcp_url(session)}")
    for profile, url in server.mcp_profiles(session).items():  # every tool profile (see server/profiles.py)
        if profile != session.mode:
            label = {"code": "CodeAct", "anthropic": "Anthropic toolset", "osworld": "OSWorld actions"}.get(profile, profile)
            lines.append(f"  {'MCP (' + label + '):':<27}{url}")
    for label, key in (("VNC (control)", "vnc_url"), ("VNC (view only)", "vnc_view_url"), ("VNC native", "vnc_native"),
                       ("record demos", "collect_url")):
        value = session.env.session_info.get(key)
        if value:
            lines.append(f"  {label + ':':<27}{value}")
    if session.agent_token:
        lines.append(f"  {'agent token:':<27}{session.agent_token}")
    lines.append(f"  {'control plane:':<27}{server.config.base_url()}/reset /step /state /ws  (health: /health)")
    if server.config.osworld_port is not None:
        lines.append(f"  {'OSWorld guest API:':<27}http://127.0.0.1:{server.config.osworld_port}  (its owner only)")
    if server.config.osworld_gate:
        lines.append(f"  {'OSWorld guest gate:':<27}{server.config.osworld_gate}  (its secret first: hci_envs.providers.tunnel)")
    if state.network:  # the agent side's network, and what holds it (or why nothing does)
        network = state.network
        allowed = f" ({', '.join(network['allow'])})" if network["allow"] else ""
        lines.append(f"  {'agent network:':<27}{network['policy']}{allowed}; enforced by {network['enforced_by']}")
    lines.append("  Ctrl-C stops the server and every process of the desktop.")
    print("\n".join(lines), file=out, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hci-envs", description="Virtual desktops for agents and people.")
    parser.add_argument("--version", action="version", version=f"hci-envs {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run a desktop environment server (MCP, control plane, VNC) on one port")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--size", type=parse_size, help="screen size, e.g. 1280x800 (default from the environment)")
    p.add_argument("--env", default=os.environ.get("HCI_ENVS_ENV", DEFAULT_ENV),
                   help="environment: an installed name, module:Class or file.py:Class (or HCI_ENVS_ENV)")
    p.add_argument("--app", action="append", metavar="CMD",
                   help="app to launch on the desktop (repeatable): a command, or its start state as JSON, e.g. "
                        "'{\"command\": \"kiosk\", \"wait_for_window\": false}'")
    p.add_argument("--mode", choices=("simulation", "production"), default="simulation")
    p.add_argument("--max-sessions", type=int, default=8)
    p.add_argument("--lazy-default-session", action="store_true",
                   help="start the default session's desktop on its first use, not at start-up (for clients that "
                        "each open a session of their own; or HCI_ENVS_LAZY_DEFAULT_SESSION=1)")
    p.add_argument("--idle-timeout", type=float, default=600.0, help="seconds before an idle session is closed")
    p.add_argument("--orphan-timeout", type=float, default=None, metavar="SECONDS",
                   help="exit after this long with no client at all (or HCI_ENVS_ORPHAN_TIMEOUT; containers "
                        "started by the Docker provider: 600)")
    p.add_argument("--control-token", help="secret for the control plane (or HCI_ENVS_CONTROL_TOKEN)")
    p.add_argument("--agent-token", help="secret for the default session's MCP endpoint (or HCI_ENVS_AGENT_TOKEN)")
    p.add_argument("--control-token-file", metavar="PATH", help="read the control token from a file")
    p.add_argument("--agent-token-file", metavar="PATH", help="read the default session's agent token from a file")
    p.add_argument("--agent-tokens", action="store_true", help="give every session a random agent token")
    p.add_argument("--isolation", choices=("auto", "uid", "none"), default=None,
                   help="run each session's agent side as an account of its own: uid (required), none, or auto "
                        "(uid where possible; default, or HCI_ENVS_ISOLATION)")
    p.add_argument("--max-agent-processes", type=int, default=None,
                   help="processes each session's agent account may run (RLIMIT_NPROC; default: no limit)")
    p.add_argument("--limit-memory", metavar="SIZE",
                   help="memory each session's agent side may use, e.g. 2G (default: an eighth of the machine's, "
                        "at least 2G); enforced by the kernel (cgroups) where the server is root")
    p.add_argument("--limit-processes", type=int, metavar="N",
                   help="processes and threads each session's agent side may run at once (default 1024)")
    p.add_argument("--limit-cpu-weight", type=int, metavar="W",
                   help="each session's share of the CPU against the others' (1 to 10000, default 100)")
    p.add_argument("--limit-disk", metavar="SIZE",
                   help="room for each session's agent files, e.g. 1G: its home and its runtime folder (TMPDIR), each, "
                        "and any one file (default: half the memory limit, at most 4G; tmpfs, which the memory limit "
                        "counts)")
    p.add_argument("--no-limits", action="store_true",
                   help="no per-session limits: one agent can then take the whole machine (for measurements)")
    p.add_argument("--network", choices=("none", "allowlist", "open"), default=None,
                   help="what each session's agent side may connect to: none (default: nothing over IP, loopback "
                        "included, but its own listeners), allowlist (--allow's destinations) or open")
    p.add_argument("--allow", action="append", metavar="HOST[:PORT]",
                   help="an allowed destination for the agent side (an address, a CIDR network or a host name, with "
                        "an optional port; repeat for more): the allowlist policy")
    p.add_argument("--public-url", default=os.environ.get("HCI_ENVS_PUBLIC_URL"),
                   help="base URL to print and report, e.g. behind a proxy or a port mapping (or HCI_ENVS_PUBLIC_URL)")
    p.add_argument("--no-vnc", action="store_true", help="serve no VNC (no /vnc/ page, no x11vnc)")
    p.add_argument("--vnc-port", type=int, help="also a raw VNC port for native viewers (0 picks a free one)")
    p.add_argument("--takeover-timeout", type=float, default=30.0,
                   help="seconds without human input before a person's hold on the desktop lapses")
    p.add_argument("--human-answer-within", type=float, metavar="SECONDS",
                   help="an environment with ask_human (--env assisted-desktop): seconds a request waits for a person "
                        "to take the desktop before the agent gets it back (default 300)")
    p.add_argument("--human-hold-for", type=float, metavar="SECONDS",
                   help="seconds a person who took the agent's hand-over may hold the desktop (default 1800)")
    p.add_argument("--pause-clock-for-people", action="store_true",
                   help="a step's timeout_s and a task's time limit do not count the time the agent waits for a "
                        "person (from ask_human until the desktop is back); by default they do")
    p.add_argument("--supervise", action="store_true",
                   help="propose and accept from the start: each of the agent's input actions waits for a person's "
                        "decision (accept, edit, or do it themselves) before it runs; POST /supervision turns it off")
    p.add_argument("--decide-within", type=float, metavar="SECONDS",
                   help="seconds a proposed action waits for a decision before it runs as proposed (default 120)")
    p.add_argument("--action-mode", choices=("tools", "code"), default="tools",
                   help="the agent interface sessions advertise: one tool per call, or CodeAct")
    p.add_argument("--episodes-dir", default=os.environ.get("HCI_ENVS_EPISODES_DIR", "episodes"),
                   help="where recordings go (default ./episodes, or HCI_ENVS_EPISODES_DIR)")
    p.add_argument("--tasks", default=os.environ.get("HCI_ENVS_TASKS"),
                   help="the task suite a reset can name tasks of: a task file or folder (default: the built-in "
                        "suite; or HCI_ENVS_TASKS), or 'apps' for the real-application suite (any TEMPLATE.SEED). "
                        "Keep a task file private to the server's user: it holds the answers")
    p.add_argument("--desktop", choices=("xvfb", "forkable", "fake"),
                   default=os.environ.get("HCI_ENVS_DESKTOP", "xvfb"),
                   help="xvfb: real X desktops (default); forkable: real X desktops that POST /sessions/ID/fork copies "
                        "live (root and CRIU 4.2+: install --fork); fake: desktops without X, the test seam for "
                        "everything but screen, input and apps (no VNC)")
    p.add_argument("--fork-share-memory", action=argparse.BooleanOptionalAction,
                   default=_env_flag("HCI_ENVS_FORK_SHARE_MEMORY"),
                   help="forkable desktops and their copies share the memory they have not changed, while the "
                        "machine runs KSM (echo 1 > /sys/kernel/mm/ksm/run). Off by default: merging is a timing "
                        "side channel between every desktop that opts in (or HCI_ENVS_FORK_SHARE_MEMORY=1)")
    p.add_argument("--observation-format", choices=("png", "jpeg", "webp", "none"),
                   default=os.environ.get("HCI_ENVS_OBSERVATION_FORMAT"),
                   help="screenshot format in step observations")
    p.add_argument("--settle", action=argparse.BooleanOptionalAction, default=_env_flag("HCI_ENVS_SETTLE"),
                   help="a step's observation waits until the screen shows the action's effect (default: on; "
                        "or HCI_ENVS_SETTLE=0/1)")
    p.add_argument("--spare", action=argparse.BooleanOptionalAction, default=_env_flag("HCI_ENVS_SPARE"),
                   help="each session keeps the next episode's desktop prepared in the background, so that a "
                        "reset swaps it in (default: on; it costs one more desktop per session; or "
                        "HCI_ENVS_SPARE=0/1)")
    p.add_argument("--osworld-port", type=int, default=None, metavar="PORT",
                   help="also serve OSWorld's guest API on this loopback port (0 picks a free one; see hci_envs.osworld)")
    p.add_argument("--home-template", metavar="DIR",
                   help="a folder copied into each session's home at every reset (its start)")
    p.add_argument("--home-view", metavar="PATH",
                   help="where the agent's processes also see their home (e.g. /home/user, as OSWorld's tasks expect; "
                        "a mount namespace of theirs: needs root)")
    p.add_argument("--osworld-gate-port", type=int, default=None, metavar="PORT",
                   help="also let OSWorld's guest API be reached through a gate on --host:PORT by whoever opens with "
                        "the secret in HCI_ENVS_OSWORLD_TOKEN (a container's harness: see hci_envs.providers.tunnel)")
    p.add_argument("--osworld-owner-uid", type=int, default=None, metavar="UID",
                   help="the uid allowed to call the OSWorld guest API (default: this server's)")
    p.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    p.add_argument("--exit-with-stdin", action="store_true", help=argparse.SUPPRESS)

    p = sub.add_parser("image", help="build the Docker images (offline: Debian from a mirror, Python from wheels)")
    p.add_argument("action", choices=("build", "base-os", "wheelhouse"),
                   help="build: images (all, or one environment's); base-os: only the debootstrap base; "
                        "wheelhouse: only the Python wheels")
    p.add_argument("env", nargs="?", help="an environment (name, module:Class or file.py:Class); default: all")
    p.add_argument("--tag", help="the image tag (default hci-envs/<class>:latest)")
    p.add_argument("--mirror", default=os.environ.get("HCI_ENVS_DEBIAN_MIRROR", "http://deb.debian.org/debian"),
                   help="the Debian package mirror for debootstrap (or HCI_ENVS_DEBIAN_MIRROR)")
    p.add_argument("--online", action="store_true",
                   help="build from the public debian:bookworm-slim (needs a registry) instead of debootstrap")
    p.add_argument("--base", help="the base image for hci-envs/base (default: the debootstrap one)")
    p.add_argument("--for-tests", action="store_true", help="also the images the test suite runs")

    p = sub.add_parser("manifest", help="OpenEnv's manifest (openenv.yaml) of what a server would serve")
    p.add_argument("--env", help="the environment (default: HCI_ENVS_ENV, else serve's)")
    p.add_argument("--tasks", help="the task catalog, as serve --tasks (default: HCI_ENVS_TASKS, else built-in)")
    p.add_argument("--image", default="base", help="the image kind whose resources to declare (base, editor, "
                                                     "apps, osworld)")

    p = sub.add_parser("validate", help="run OpenEnv's validator on this checkout, an image or a server")
    p.add_argument("target", nargs="?", help="a running server's URL (default: this checkout)")
    p.add_argument("--image", help="validate this image instead (built by `hci-envs image build`)")
    p.add_argument("--level", default="semantic", choices=("static", "runtime", "semantic"),
                   help="the validator's level (default: every level it implements)")

    for register in plugins.load_all(plugins.CLI):  # commands of other packages (recorders: record, replay)
        register(sub, command)
    return parser


@command("manifest")
def _manifest(args: argparse.Namespace) -> int:
    from .manifest import text

    print(text(env=args.env, tasks=args.tasks, image=args.image), end="")
    return 0


@command("validate")
def _validate(args: argparse.Namespace) -> int:
    from .openenv_check import VERDICTS, validate

    what = args.target or args.image or "this checkout"
    print(f"hci-envs: OpenEnv's validator on {what} (level {args.level}; an image's runtime level builds and runs "
          "it: a minute or more)", file=sys.stderr, flush=True)
    code, report, output = validate(args.target, image=args.image, level=args.level)
    print(output)
    verdict = report.get("verdict") or VERDICTS.get(code, f"exit code {code}")
    skipped = [r["check_id"] for r in report.get("results", []) if r.get("status") == "skip"]
    print(f"hci-envs: verdict: {verdict}" + (f" ({len(skipped)} checks skipped by the validator: see above)"
                                              if skipped else ""), file=sys.stderr)
    return code


def _version() -> str:
    from .. import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _COMMANDS[args.command](args)
    except HciEnvsError as exc:
        print(f"hci-envs: error: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
