"""OSWorld's ``computer_13`` action space and the canonical actions.

Payloads look like ``{"action_type": "CLICK", "parameters": {"button": "left", "x": 10, "y": 20,
"num_clicks": 2}}``. Key names are pyautogui's ("enter", "ctrl", "win", "pageup"). OSWorld's SCROLL follows
pyautogui (positive dy scrolls up); ours scrolls down for positive dy, so the sign flips. DRAG_TO drags from
wherever the pointer is. DONE and FAIL raise :class:`EpisodeSignal`.

Coordinates: OSWorld's agents click in the pixels of the screenshot they were given. For a model that works
on screenshots scaled down, pass the factor as ``scale`` (image pixels per screen pixel) to
:func:`from_osworld`, which maps every position back to the screen, and to :func:`observation`, which gives
the screenshot and the accessibility tree's coordinates in that same space.
"""

from __future__ import annotations

from typing import Any

from . import EpisodeSignal, UnsupportedActionError, parse_for, translator, with_scale
from .keynames import from_pyautogui_key, to_pyautogui_keys

SCHEMA = "OSWorld computer_13"
ACTION_TYPES = ("MOVE_TO", "CLICK", "MOUSE_DOWN", "MOUSE_UP", "RIGHT_CLICK", "DOUBLE_CLICK", "DRAG_TO", "SCROLL",
                "TYPING", "PRESS", "KEY_DOWN", "KEY_UP", "HOTKEY", "WAIT", "FAIL", "DONE")


def _param(p: dict[str, Any], key: str, default: Any = ...) -> Any:
    if key in p:
        return p[key]
    if default is ...:
        raise UnsupportedActionError(f"{SCHEMA}: this action needs the parameter {key!r}", field=key)
    return default


@translator(SCHEMA)
def from_osworld(payload: dict[str, Any], *, wait_ms: int = 1000, scale: float | None = None) -> list[dict[str, Any]]:
    kind = payload.get("action_type")
    p = payload.get("parameters") or {}
    out: list[dict[str, Any]]
    if kind == "MOVE_TO":
        out = [with_scale({"type": "mouse_move", "x": _param(p, "x"), "y": _param(p, "y")}, scale)]
    elif kind in ("CLICK", "RIGHT_CLICK", "DOUBLE_CLICK"):
        button = "right" if kind == "RIGHT_CLICK" else p.get("button", "left")
        count = 2 if kind == "DOUBLE_CLICK" else int(p.get("num_clicks", 1))
        action: dict[str, Any] = {"type": "click", "button": button, "count": count}
        if ("x" in p) != ("y" in p):
            missing = "y" if "x" in p else "x"
            raise UnsupportedActionError(f"{SCHEMA}: a click at a position needs both x and y; {missing!r} is missing",
                                         field=missing)
        if "x" in p:
            action["x"], action["y"] = p["x"], p["y"]
            with_scale(action, scale)
        out = [action]
    elif kind in ("MOUSE_DOWN", "MOUSE_UP"):
        out = [{"type": kind.lower(), "button": p.get("button", "left")}]
    elif kind == "DRAG_TO":
        out = [{"type": "mouse_down", "button": "left"},
               with_scale({"type": "mouse_move", "x": _param(p, "x"), "y": _param(p, "y")}, scale),
               {"type": "mouse_up", "button": "left"}]
    elif kind == "SCROLL":
        out = [{"type": "scroll", "dx": int(p.get("dx", 0)), "dy": -int(p.get("dy", 0))}]
    elif kind == "TYPING":
        out = [{"type": "type_text", "text": str(_param(p, "text"))}]
    elif kind == "PRESS":
        out = [{"type": "key", "keys": from_pyautogui_key(str(_param(p, "key")))}]
    elif kind in ("KEY_DOWN", "KEY_UP"):
        out = [{"type": kind.lower(), "key": from_pyautogui_key(str(_param(p, "key")))}]
    elif kind == "HOTKEY":
        keys = _param(p, "keys")
        if not isinstance(keys, list) or not keys:
            raise UnsupportedActionError(f"{SCHEMA}: HOTKEY needs a list of keys", field="keys")
        out = [{"type": "key", "keys": "+".join(from_pyautogui_key(str(k)) for k in keys)}]
    elif kind == "WAIT":
        out = [{"type": "wait", "ms": wait_ms}]
    elif kind in ("DONE", "FAIL"):
        raise EpisodeSignal(kind)
    else:
        raise UnsupportedActionError(f"{SCHEMA}: unknown action_type {kind!r}; known: {', '.join(ACTION_TYPES)}",
                                     field="action_type")
    return out


def to_osworld(action: dict[str, Any]) -> list[dict[str, Any]]:
    a = parse_for(SCHEMA, action)

    def act(kind: str, **parameters: Any) -> dict[str, Any]:
        return {"action_type": kind, "parameters": parameters}

    if a.type == "mouse_move":
        return [act("MOVE_TO", x=a.x, y=a.y)]
    if a.type == "click" and not a.modifiers:
        position = {"x": a.x, "y": a.y} if a.x is not None else {}
        return [act("CLICK", button=a.button, num_clicks=a.count, **position)]
    if a.type in ("mouse_down", "mouse_up"):
        return [act(a.type.upper(), button=a.button)]
    if a.type == "drag" and a.button == "left" and not a.modifiers:
        (x0, y0), *rest = a.path
        if len(rest) == 1:
            return [act("MOVE_TO", x=x0, y=y0), act("DRAG_TO", x=rest[0][0], y=rest[0][1])]
        # DRAG_TO goes straight to one point; a path goes through the button held across its moves.
        return ([act("MOVE_TO", x=x0, y=y0), act("MOUSE_DOWN", button="left")]
                + [act("MOVE_TO", x=x, y=y) for x, y in rest] + [act("MOUSE_UP", button="left")])
    if a.type == "scroll" and not a.modifiers:
        moves = [act("MOVE_TO", x=a.x, y=a.y)] if a.x is not None else []
        return moves + [act("SCROLL", dx=a.dx, dy=-a.dy)]
    if a.type == "type_text":
        return [act("TYPING", text=a.text)]
    if a.type == "key" and a.repeat == 1:
        out = []
        for combo in a.combos:
            parts = to_pyautogui_keys(combo)
            out.append(act("PRESS", key=parts[0]) if len(parts) == 1 else act("HOTKEY", keys=parts))
        return out
    if a.type in ("key_down", "key_up"):
        return [act(a.type.upper(), key=to_pyautogui_keys(a.key)[0])]
    if a.type == "wait":
        return [act("WAIT")]
    raise UnsupportedActionError(f"{SCHEMA} has no equivalent of this {a.type!r}", field="type")


# -- observations -------------------------------------------------------------------------------------------
#: The namespaces of OSWorld's accessibility tree XML (its server's AT-SPI dump, which its agents linearize).
NAMESPACES = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
}


#: Applications named in the XML as OSWorld's Ubuntu names them: there the browser is Google Chrome, which
#: ``google-chrome`` starts; here it starts Debian's chromium (hci_envs.tools.osworld_chrome), which names itself
#: Chromium. OSWorld's getters find the address bar under "Google Chrome" (and its agents read that name).
OSWORLD_APP_NAMES = {"Chromium": "Google Chrome"}


def accessibility_tree_xml(tree: dict[str, Any], *, scale: float | None = None) -> str:
    """Our accessibility tree (``accessibility_tree``'s result, or an observation's) as OSWorld's XML: one
    element per node named by its role (``push-button``), ``name``, its states as ``st:NAME="true"``, its box
    as ``cp:screencoord="(x, y)"`` and ``cp:size="(w, h)"`` in screen pixels (in a model's space at ``scale``,
    given one), its value as ``val:value`` and its text as the element's text; apps under a
    ``desktop-frame``, named as on OSWorld's machine (OSWORLD_APP_NAMES). OSWorld's agents read this with ``linearize_accessibility_tree`` as they read their own
    server's dump."""
    import xml.etree.ElementTree as ET

    for prefix, uri in NAMESPACES.items():
        ET.register_namespace(prefix, uri)
    # the tree's boxes are in its own scale's pixels: to the screen, then to the model's space
    factor = (scale or 1.0) / float(tree.get("scale") or 1.0)
    root = ET.Element("desktop-frame", {"name": "main"})
    made: dict[int, Any] = {}
    for node in tree.get("nodes", []):
        attrs = {"name": node.get("name") or ""}
        if node["role"] == "application":
            attrs["name"] = OSWORLD_APP_NAMES.get(attrs["name"], attrs["name"])
        for state in node.get("states", []):
            attrs[f"{{{NAMESPACES['st']}}}{state.replace(' ', '-')}"] = "true"
        if node.get("box"):
            x, y, w, h = (round(v * factor) for v in node["box"])
            attrs[f"{{{NAMESPACES['cp']}}}screencoord"] = f"({x}, {y})"
            attrs[f"{{{NAMESPACES['cp']}}}size"] = f"({w}, {h})"
        if node.get("value") is not None:
            attrs[f"{{{NAMESPACES['val']}}}value"] = str(node["value"])
        if node.get("description"):
            attrs[f"{{{NAMESPACES['attr']}}}description"] = node["description"]
        parent = made.get(node.get("parent")) if node.get("parent") is not None else None
        element = ET.SubElement(parent if parent is not None else root, node["role"].replace(" ", "-"), attrs)
        if node.get("text"):
            element.text = node["text"]
        made[node["element"]] = element
    return ET.tostring(root, encoding="unicode")


def observation(obs: Any, *, instruction: str | None = None, scale: float | None = None) -> dict[str, Any]:
    """An observation as OSWorld's environment hands its agents one: ``screenshot`` (image bytes),
    ``accessibility_tree`` (XML, see :func:`accessibility_tree_xml`; None unless the observation carries the
    tree: ``observation={"accessibility": True}``), ``terminal`` (None) and ``instruction``. With ``scale``,
    the screenshot and the tree are in the model's space at that scale (the one to give :func:`from_osworld`):
    a screenshot taken at another scale is resized (Pillow: ``hci-envs[client-images]``); configure the
    environment's observation with the same ``scale`` and it is passed on as it is."""
    data = obs if isinstance(obs, dict) else obs.model_dump()
    shot = data.get("screenshot")
    image = None
    if shot:
        import base64

        image = base64.b64decode(shot["data"])
        if scale is not None and abs(float(shot.get("scale") or 1.0) - scale) > 1e-6:
            image = _rescaled(image, shot, scale)
    tree = data.get("accessibility_tree")
    return {"screenshot": image, "accessibility_tree": accessibility_tree_xml(tree, scale=scale) if tree else None,
            "terminal": None, "instruction": instruction}


def _rescaled(image: bytes, shot: dict[str, Any], scale: float) -> bytes:
    """A screenshot (taken at ``shot["scale"]``) as PNG bytes at ``scale`` of the screen."""
    import io

    from ..errors import require

    pil = require("PIL.Image", "client-images", "resizing a screenshot into a model's space")
    taken = float(shot.get("scale") or 1.0)
    size = (max(1, round(shot["width"] / taken * scale)), max(1, round(shot["height"] / taken * scale)))
    out = io.BytesIO()
    pil.open(io.BytesIO(image)).convert("RGB").resize(size, pil.Resampling.LANCZOS).save(out, format="PNG")
    return out.getvalue()
