"""VNC for people: the proxy in front of each session's x11vnc, roles, takeover, and the input tap."""

from .takeover import ControlStatus, HumanControl
from .proxy import Tap, Viewer, VncSession
from .rfb import ClientMessage

__all__ = ["ClientMessage", "ControlStatus", "HumanControl", "Tap", "Viewer", "VncSession"]
