"""A small Tk app the tests drive: every widget reports what it received.

    python3 tk_probe.py STATE_FILE [LOG_FILE]

STATE_FILE is rewritten (atomically) on every change with the widgets' contents and their screen geometry,
so a test can aim at a widget and then check what the click or the typing did. LOG_FILE, if given, gets one
JSON line per input the app saw (clicks, double and triple clicks, selections, typed text, chords): the
record a demonstration replay is compared against. Standard library only.

The state also carries ``events``: every press (with the click count Tk itself gave it), release (with how
long the button was held, by the X server's clock), wheel click and non-modifier key the app received, in
order; and each widget's insertion point, selection and view. F12 puts every widget back as it started
(contents, selections, anchors, views, focus, logs), so that one running app can take many input streams
from the same state.
"""

from __future__ import annotations

import json
import os
import sys
import tkinter as tk

# Several sessions' probes (each as its own agent account) may report into the same files.
os.umask(0)
STATE_PATH = sys.argv[1]
LOG_PATH = sys.argv[2] if len(sys.argv) > 2 else None

root = tk.Tk()
root.title("hci-envs probe")
root.geometry("760x560+0+0")
root.configure(bg="#d9d9d9")
FONT = ("DejaVu Sans", 13)

state: dict[str, object] = {"clicks": 0, "keys": [], "ready": False}
log_file = open(LOG_PATH, "a", encoding="utf-8") if LOG_PATH else None


def log(kind: str, **data: object) -> None:
    if log_file is not None:
        log_file.write(json.dumps({"kind": kind, **data}, ensure_ascii=False) + "\n")
        log_file.flush()


button = tk.Button(root, text="Press me", font=FONT, width=12)
button.place(x=10, y=10, width=160, height=40)
counter = tk.Label(root, text="clicks: 0", font=FONT, bg="#d9d9d9")
counter.place(x=180, y=10, width=150, height=40)


def on_press() -> None:
    state["clicks"] = int(state["clicks"]) + 1  # type: ignore[arg-type]
    counter.configure(text=f"clicks: {state['clicks']}")
    button.configure(bg="#4caf50" if int(state["clicks"]) % 2 else "#d9d9d9")  # type: ignore[arg-type]
    log("button", clicks=state["clicks"])
    schedule()


button.configure(command=on_press)

# No blinking insertion cursors: two captures of an idle probe must be identical.
entry = tk.Entry(root, font=FONT, insertofftime=0)
entry.place(x=10, y=60, width=740, height=34)
entry2 = tk.Entry(root, font=FONT, insertofftime=0)
entry2.place(x=10, y=100, width=740, height=34)

text = tk.Text(root, font=FONT, wrap="none", exportselection=False, insertofftime=0)
text.insert("1.0", "alpha beta gamma delta\nsecond line of text here\nthird line\n")
text.place(x=10, y=145, width=460, height=110)

listbox = tk.Listbox(root, font=FONT, exportselection=False)
for i in range(200):
    listbox.insert("end", f"item {i:03d}")
listbox.place(x=480, y=145, width=270, height=200)

# A short list in extended selection mode: wheel bursts reach both of its ends (where a summed burst and the
# notches one by one end apart), and ctrl- and shift-clicks change what is selected.
list2 = tk.Listbox(root, font=FONT, exportselection=False, selectmode="extended")
for i in range(30):
    list2.insert("end", f"row {i:02d} " + "wide " * (i % 5))
list2.place(x=480, y=355, width=270, height=190)

canvas = tk.Canvas(root, bg="white", highlightthickness=0)
canvas.place(x=10, y=265, width=460, height=280)
marks: list[list[int]] = []


def on_canvas_click(event: tk.Event) -> None:
    marks.append([event.x, event.y])
    canvas.create_oval(event.x - 4, event.y - 4, event.x + 4, event.y + 4, fill="red", outline="red")
    log("canvas_click", x=event.x, y=event.y)
    schedule()


canvas.bind("<Button-1>", on_canvas_click)


def select_all(widget: tk.Widget) -> str:
    if isinstance(widget, tk.Entry):
        widget.selection_range(0, "end")
        widget.icursor("end")
    elif isinstance(widget, tk.Text):
        widget.tag_add("sel", "1.0", "end-1c")
    log("chord", keys="ctrl+a")
    schedule()
    return "break"


for w in (entry, entry2, text):
    w.bind("<Control-a>", lambda e: select_all(e.widget))
    w.bind("<KeyRelease>", lambda e: schedule())
    w.bind("<ButtonRelease-1>", lambda e: schedule())
    w.bind("<<Paste>>", lambda e: (log("chord", keys="paste"), root.after(1, schedule)))
    w.bind("<<Copy>>", lambda e: (log("chord", keys="copy"), root.after(1, schedule)))


def on_text_click(event: tk.Event, count: int) -> None:
    log({1: "click", 2: "double_click", 3: "triple_click"}[count], widget="text", x=event.x, y=event.y)
    root.after(1, schedule)


text.bind("<Button-1>", lambda e: on_text_click(e, 1), add="+")
text.bind("<Double-Button-1>", lambda e: on_text_click(e, 2), add="+")
text.bind("<Triple-Button-1>", lambda e: on_text_click(e, 3), add="+")
listbox.bind("<MouseWheel>", lambda e: root.after(1, schedule), add="+")
listbox.bind("<Button-4>", lambda e: root.after(1, schedule), add="+")
listbox.bind("<Button-5>", lambda e: root.after(1, schedule), add="+")
listbox.bind("<<ListboxSelect>>", lambda e: schedule(), add="+")


# -- the ordered record of input the app received (state["events"]) ----------------------------------------
MODIFIER_KEYSYMS = {"Shift_L", "Shift_R", "Control_L", "Control_R", "Alt_L", "Alt_R", "Meta_L", "Meta_R",
                    "Super_L", "Super_R", "ISO_Level3_Shift", "Mode_switch", "Caps_Lock", "Num_Lock"}
WIDGET_NAMES: dict[str, str] = {}
events: list[list[object]] = []
pressed_at: dict[int, tuple[int, int, int]] = {}  # button -> (X server time, x_root, y_root) of its press


def modifiers(event: tk.Event) -> list[str]:
    return [name for bit, name in ((0x4, "ctrl"), (0x8, "alt"), (0x1, "shift")) if event.state & bit]


def widget_name(event: tk.Event) -> str:
    return WIDGET_NAMES.get(str(event.widget), str(event.widget))


def record(*entry: object) -> None:
    events.append(list(entry))
    del events[:-1000]
    schedule()


def on_button(event: tk.Event, count: int) -> None:
    if event.num in (4, 5, 6, 7):
        record("wheel", widget_name(event), event.num, modifiers(event))
        return
    pressed_at[event.num] = (event.time, event.x_root, event.y_root)
    record("press", widget_name(event), event.num, count, event.x, event.y, modifiers(event))


def on_release(event: tk.Event) -> None:
    if event.num not in pressed_at:
        return
    time_down, x0, y0 = pressed_at.pop(event.num)
    held = (event.time - time_down) & 0xFFFFFFFF  # the X server's millisecond clock wraps
    travel = max(abs(event.x_root - x0), abs(event.y_root - y0))
    record("release", widget_name(event), event.num, event.x, event.y, {"held_ms": held, "travel": travel})


# The "all" tag sees every widget's input besides the class bindings; the most specific of its own bindings
# fires, so each press is recorded once, with the count Tk's own double and triple click rules give it.
root.bind_all("<ButtonPress>", lambda e: on_button(e, 1), add="+")
for _button in (1, 2, 3):
    root.bind_all(f"<Double-ButtonPress-{_button}>", lambda e: on_button(e, 2), add="+")
    root.bind_all(f"<Triple-ButtonPress-{_button}>", lambda e: on_button(e, 3), add="+")
root.bind_all("<ButtonRelease>", on_release, add="+")


def on_key(event: tk.Event) -> None:
    keys = state["keys"]
    assert isinstance(keys, list)
    mods = modifiers(event)
    keys.append({"keysym": event.keysym, "char": event.char, "mods": mods})
    del keys[:-50]
    if event.keysym not in MODIFIER_KEYSYMS:
        record("key", event.keysym, mods)
    if event.char and event.char.isprintable() and not (event.state & 0xC):
        log("char", char=event.char)
    elif mods and "shift" not in mods[:1] or event.keysym in ("Return", "Tab", "Escape", "BackSpace"):
        log("key", keysym=event.keysym, mods=mods)
    schedule()


root.bind_all("<KeyPress>", on_key, add="+")

TEXT_START = text.get("1.0", "end-1c")


def reset_widgets(_event: tk.Event | None = None) -> str:
    """Every widget as it started, including what no screenshot shows (selection anchors, views)."""
    for w in (entry, entry2):
        w.delete(0, "end")
        w.selection_clear()
        w.selection_from(0)
        w.xview_moveto(0)
    text.delete("1.0", "end")
    text.insert("1.0", TEXT_START)
    text.tag_remove("sel", "1.0", "end")
    for mark in text.mark_names():  # Tk keeps its selection anchor as a mark
        if mark != "current":
            text.mark_set(mark, "1.0")
    text.xview_moveto(0)
    text.yview_moveto(0)
    for lb in (listbox, list2):
        lb.selection_clear(0, "end")
        lb.activate(0)
        lb.selection_anchor(0)
        lb.xview_moveto(0)
        lb.yview_moveto(0)
    state["clicks"] = 0
    counter.configure(text="clicks: 0")
    button.configure(bg="#d9d9d9")
    marks.clear()
    canvas.delete("all")
    pressed_at.clear()
    events.clear()
    entry.focus_set()
    state["resets"] = int(state.get("resets", 0)) + 1  # type: ignore[arg-type]
    schedule()
    return "break"


root.bind_all("<KeyPress-F12>", reset_widgets)


def geometry(widget: tk.Widget) -> list[int]:
    return [widget.winfo_rootx(), widget.winfo_rooty(), widget.winfo_width(), widget.winfo_height()]


def text_selection() -> str:
    try:
        return text.get("sel.first", "sel.last")
    except tk.TclError:
        return ""


def entry_selection(widget: tk.Entry) -> str:
    try:
        return widget.selection_get() if widget.selection_present() else ""
    except tk.TclError:
        return ""


def entry_state(widget: tk.Entry) -> dict[str, object]:
    selection = [widget.index("sel.first"), widget.index("sel.last")] if widget.selection_present() else []
    return {"insert": widget.index("insert"), "selection": selection, "xview": round(widget.xview()[0], 4)}


def listbox_state(widget: tk.Listbox) -> dict[str, object]:
    return {"selection": list(widget.curselection()), "active": widget.index("active"),
            "first_visible": widget.nearest(0), "xview": round(widget.xview()[0], 4)}


def widget_states() -> dict[str, object]:
    return {
        "entry": entry_state(entry), "entry2": entry_state(entry2),
        "text": {"insert": text.index("insert"), "selection": [str(i) for i in text.tag_ranges("sel")],
                 "view": [round(text.xview()[0], 4), round(text.yview()[0], 4)]},
        "listbox": listbox_state(listbox), "list2": listbox_state(list2),
    }


_pending = [False]


def schedule() -> None:
    if not _pending[0]:
        _pending[0] = True
        root.after(5, write_state)


def write_state() -> None:
    _pending[0] = False
    words = {
        # where the words of the Text widget are, so a test can double-click "beta"
        "beta": list(text.bbox("1.6") or []),
        "line2": list(text.bbox("2.3") or []),
        "alpha": list(text.bbox("1.0") or []),
        "gamma_end": list(text.bbox("1.15") or []),
    }
    # ready once it is on screen and laid out (Tk has no box for a character before that; a loaded machine
    # showed a test the state of a probe not yet drawn): once ready, always (a test may scroll the words away)
    laid_out = bool(root.winfo_viewable()) and all(words.values())
    state.update(
        {
            "ready": bool(state["ready"]) or laid_out,
            "entry": entry.get(),
            "entry2": entry2.get(),
            "entry_selection": entry_selection(entry),
            "text": text.get("1.0", "end-1c"),
            "text_selection": text_selection(),
            "listbox_top": listbox.yview()[0],
            "listbox_first_visible": listbox.nearest(0),
            "marks": marks,
            "events": events,
            "widget_state": widget_states(),
            "focus": str(root.focus_get() or ""),
            "widgets": {
                name: geometry(w)
                for name, w in (("button", button), ("entry", entry), ("entry2", entry2), ("text", text),
                                ("listbox", listbox), ("canvas", canvas), ("counter", counter),
                                ("list2", list2))
            },
            "text_char_bbox": words,
        }
    )
    tmp = STATE_PATH + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, ensure_ascii=False)
    os.replace(tmp, STATE_PATH)


def poll() -> None:  # scroll positions and focus change without events we bind; keep the state fresh
    write_state()
    root.after(100, poll)


for _name, _widget in (("window", root), ("button", button), ("counter", counter), ("entry", entry),
                      ("entry2", entry2), ("text", text), ("listbox", listbox), ("list2", list2),
                      ("canvas", canvas)):
    WIDGET_NAMES[str(_widget)] = _name

entry.focus_set()
root.after(50, poll)
root.mainloop()
