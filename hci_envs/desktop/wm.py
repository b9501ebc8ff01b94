"""The window manager's configuration when it runs on the server's side.

openbox (the default) runs as the server's user, not the agent's, so that a reset, which ends every process of
the agent's account, keeps it: restarting it would cost each reset tens of milliseconds. That is safe only
because it then cannot start programs: its configuration is the system's with every ``Execute`` action
(Print runs scrot, Super+E a file manager by default) and every ``Restart`` with another command taken out,
and a menu file without entries (the default root menu launches a terminal and a browser). What is left
moves, resizes, focuses and closes windows. Any other window manager runs as the agent, and restarts with
its session.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

SYSTEM_RC = Path("/etc/xdg/openbox/rc.xml")
_NS = "http://openbox.org/3.4/rc"

_FALLBACK_RC = f"""<?xml version="1.0" encoding="UTF-8"?>
<openbox_config xmlns="{_NS}">
  <focus><focusNew>yes</focusNew><followMouse>no</followMouse></focus>
  <mouse><context name="Frame"><mousebind button="Left" action="Press"><action name="Focus"/><action name="Raise"/>
  </mousebind></context><context name="Client"><mousebind button="Left" action="Press"><action name="Focus"/>
  <action name="Raise"/></mousebind></context><context name="Titlebar"><mousebind button="Left" action="Drag">
  <action name="Move"/></mousebind></context></mouse>
</openbox_config>
"""


def write_openbox_config(directory: Path) -> Path:
    """A copy of the system's openbox configuration that can start no program; returns rc.xml's path."""
    menu = directory / "openbox-menu.xml"
    menu.write_text('<?xml version="1.0" encoding="UTF-8"?>\n'
                    '<openbox_menu xmlns="http://openbox.org/3.4/menu"><menu id="root-menu" label=""/></openbox_menu>\n')
    try:
        tree = ET.parse(SYSTEM_RC)
    except (OSError, ET.ParseError):
        tree = ET.ElementTree(ET.fromstring(_FALLBACK_RC))
    ET.register_namespace("", _NS)
    root = tree.getroot()
    for parent in list(root.iter()):
        for child in list(parent):
            if _local(child.tag) == "action" and (child.get("name") or "").lower() in ("execute", "restart"):
                parent.remove(child)
    for section in [e for e in root if _local(e.tag) == "menu"]:
        for entry in [e for e in section if _local(e.tag) == "file"]:
            section.remove(entry)
        file_entry = ET.SubElement(section, f"{{{_NS}}}file")
        file_entry.text = str(menu)
    rc = directory / "openbox-rc.xml"
    tree.write(rc, encoding="utf-8", xml_declaration=True)
    return rc


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
