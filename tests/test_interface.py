"""The declared desktop interface (hci_envs.desktop.interface): the Xvfb desktop and the fake one are two
implementations of it, face by face, so the environment and the executor can be typed against it alone."""

from __future__ import annotations

import inspect

import pytest

from hci_envs.desktop.base_desktop import BaseDesktop
from hci_envs.desktop.desktop import Desktop
from hci_envs.desktop.events import DesktopEvents
from hci_envs.desktop.fake import FakeDesktop, FakeEvents, FakeInput, FakeScreen
from hci_envs.desktop.interface import EventSource, InputDevice, ScreenSource, VirtualDesktop
from hci_envs.desktop.screen import Screen
from hci_envs.desktop.xinput import Input
from hci_envs.fork.forkable import ForkableDesktop

pytestmark = pytest.mark.fake


def members(protocol: type) -> set[str]:
    """The methods and properties a protocol declares (not its data attributes, which instances set)."""
    return {name for name, value in vars(protocol).items()
            if not name.startswith("_") and (inspect.isfunction(value) or isinstance(value, property))}


@pytest.mark.parametrize("protocol, implementations", [
    (VirtualDesktop, [Desktop, FakeDesktop, ForkableDesktop]),
    (ScreenSource, [Screen, FakeScreen]),
    (InputDevice, [Input, FakeInput]),
    (EventSource, [DesktopEvents, FakeEvents]),
])
def test_both_desktops_implement_every_face(protocol, implementations):
    for cls in implementations:
        missing = sorted(name for name in members(protocol) if not hasattr(cls, name))
        assert not missing, f"{cls.__name__} lacks {missing} of {protocol.__name__}"


def test_the_two_desktops_are_siblings():
    """Neither is the other: both are BaseDesktop (the agent's side), each with a display of its own."""
    assert not issubclass(FakeDesktop, Desktop) and not issubclass(Desktop, FakeDesktop)
    assert issubclass(FakeDesktop, BaseDesktop) and issubclass(Desktop, BaseDesktop)
    for name in ("start", "restart_session", "quick_failure", "health", "launch", "vnc_socket"):
        assert getattr(FakeDesktop, name) is not getattr(Desktop, name), name
    with pytest.raises(TypeError, match="abstract"):
        BaseDesktop()  # a desktop without a display is no desktop


def test_a_running_fake_desktop_is_a_virtual_desktop():
    desktop = FakeDesktop(None).start()
    try:
        assert isinstance(desktop, VirtualDesktop)
        assert isinstance(desktop.screen, ScreenSource) and isinstance(desktop.input, InputDevice)
        assert isinstance(desktop.events, EventSource)
    finally:
        desktop.close()


def test_what_is_not_a_desktop_is_not_taken_for_one():
    assert not isinstance(object(), VirtualDesktop)
    assert not members(VirtualDesktop) <= set(dir(object))
