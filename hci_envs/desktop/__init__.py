"""The desktop runtime: Xvfb, a window manager and apps, with screen capture, XTEST input and the clipboard.

Needs the ``server`` extra and X11 programs (Xvfb, a window manager); nothing else in hci_envs imports it at
module import time, so clients work without it.
"""

from .desktop import Desktop, DesktopHealth
from .display import APT_PACKAGES
from .encode import Frame, decode
from .screen import EncodedImage

__all__ = ["APT_PACKAGES", "Desktop", "DesktopHealth", "EncodedImage", "Frame", "decode"]
