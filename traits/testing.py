"""Conformance tests per trait, as mixins for pytest (in the manner of dm_env's EnvironmentTestMixin).

    from hci_envs.traits.testing import BashAccessConformance

    class TestMyEnvBash(BashAccessConformance):
        env_class = MyEnv

Each mixin starts one environment for its class (``env_class``, ``start_state``) and checks that the trait's
tools behave as documented. ``CONFORMANCE`` maps each trait to its mixin; ``conformance_classes(env_class)``
builds the test classes for every trait an environment has.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import pytest

from hci_envs.errors import InvalidActionError

from .bash import BashAccess
from .hci import HumanComputerInterfaceable
from .python import PythonAccess


class TraitConformance:
    env_class: ClassVar[type]
    start_state: ClassVar[dict[str, Any] | None] = None
    #: The environment's other options (``desktop="forkable"``, say).
    options: ClassVar[dict[str, Any]] = {}

    @pytest.fixture(scope="class")
    @classmethod
    def env(cls) -> Any:
        env = cls.env_class(start_state=cls.start_state, **cls.options)
        env.reset()
        yield env
        env.close()


class HumanComputerInterfaceableConformance(TraitConformance):
    def test_every_action_is_a_tool(self, env: Any) -> None:
        from hci_envs.actions import ACTIONS

        assert set(ACTIONS) <= set(env.tools())
        assert {n for n in ACTIONS if env.tools()[n].read_only} == {
            "screenshot", "cursor_position", "screen_size", "clipboard_get", "accessibility_tree"}

    def test_screenshot_reports_its_geometry(self, env: Any) -> None:
        out = env.call_tool("screenshot", {"format": "jpeg", "max_side": 320})
        width, height = env.declared_state.width, env.declared_state.height
        assert out.images and max(out.images[0].width, out.images[0].height) == 320
        assert abs(out.data["scale"] - 320 / max(width, height)) < 1e-9

    def test_pointer_goes_where_it_is_told(self, env: Any) -> None:
        env.call_tool("mouse_move", {"x": 7, "y": 9})
        assert env.call_tool("cursor_position", {}).data == {"x": 7, "y": 9}

    def test_bad_input_is_refused_by_field(self, env: Any) -> None:
        with pytest.raises(InvalidActionError) as info:
            env.call_tool("click", {"x": env.declared_state.width, "y": 0})
        assert "off screen" in str(info.value)
        with pytest.raises(InvalidActionError, match="unknown key name"):
            env.call_tool("key", {"keys": "ctrl+nokey"})

    def test_clipboard_round_trip(self, env: Any) -> None:
        env.call_tool("clipboard_set", {"text": "conformance ✓"})
        assert env.call_tool("clipboard_get", {}).data == {"text": "conformance ✓"}


class BashAccessConformance(TraitConformance):
    def test_exit_code_and_streams(self, env: Any) -> None:
        out = env.call_tool("bash", {"command": "echo out; echo err >&2; exit 7"})
        assert (out.data["stdout"], out.data["stderr"], out.data["exit_code"]) == ("out\n", "err\n", 7)

    def test_runs_in_the_session_home_with_its_display(self, env: Any) -> None:
        out = env.call_tool("bash", {"command": "pwd; echo $DISPLAY"})
        # as the agent sees them: where its home is, and its display (a forkable desktop's are the tree's own)
        assert out.data["stdout"].split() == [env.desktop.agent_home, env.desktop.app_env()["DISPLAY"]]

    def test_timeout_stops_the_command(self, env: Any) -> None:
        start = time.monotonic()
        out = env.call_tool("bash", {"command": "sleep 30", "timeout": 1})
        assert out.data["timed_out"] and time.monotonic() - start < 10

    def test_output_is_capped(self, env: Any) -> None:
        out = env.call_tool("bash", {"command": "yes", "max_output": 1000, "timeout": 20})
        assert len(out.data["stdout"]) == 1000 and out.data["stdout_dropped"] > 0

    def test_persistent_shell_keeps_state(self, env: Any) -> None:
        env.call_tool("bash", {"command": "cd /tmp && export CONFORMANCE=1", "persistent": True})
        out = env.call_tool("bash", {"command": "pwd; echo $CONFORMANCE", "persistent": True})
        assert out.data["stdout"].split() == ["/tmp", "1"]


class PythonAccessConformance(TraitConformance):
    def test_state_persists(self, env: Any) -> None:
        env.call_tool("python", {"code": "conformance_value = 6 * 7"})
        assert env.call_tool("python", {"code": "print(conformance_value)"}).data["stdout"] == "42\n"

    def test_exceptions_are_reported(self, env: Any) -> None:
        out = env.call_tool("python", {"code": "raise ValueError('boom')"})
        assert out.is_error and "ValueError: boom" in out.data["error"]

    def test_timeout_interrupts_and_state_survives(self, env: Any) -> None:
        env.call_tool("python", {"code": "survivor = 'yes'"})
        out = env.call_tool("python", {"code": "while True:\n    survivor_loop = 1", "timeout": 1})
        assert out.data["timed_out"]
        assert env.call_tool("python", {"code": "print(survivor)"}).data["stdout"] == "yes\n"


CONFORMANCE: dict[type, type[TraitConformance]] = {
    HumanComputerInterfaceable: HumanComputerInterfaceableConformance,
    BashAccess: BashAccessConformance,
    PythonAccess: PythonAccessConformance,
}


def conformance_classes(env_class: type, start_state: dict[str, Any] | None = None,
                        **options: Any) -> dict[str, type]:
    """A pytest class per trait of ``env_class`` (by the name it should have in a test module), its
    environments made with ``start_state`` and ``options``."""
    out = {}
    for trait, mixin in CONFORMANCE.items():
        if issubclass(env_class, trait):
            name = f"Test{env_class.__name__}{trait.__name__}"
            out[name] = type(name, (mixin,), {"env_class": env_class, "start_state": start_state, "options": options})
    return out


__all__ = [
    "BashAccessConformance", "CONFORMANCE", "HumanComputerInterfaceableConformance", "PythonAccessConformance",
    "TraitConformance", "conformance_classes",
]
