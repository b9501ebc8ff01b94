"""A GTK 3 window of known widgets, for the accessibility tree's tests and benchmark.

    /usr/bin/python3 gtk_widgets.py STATE_FILE [ROWS]

ROWS rows (default 10), each a label "Row N", an entry holding "value N", a check button "Option N" and a
push button "Press N"; above them a push button "Apply", a scale (slider) at 30 and a progress bar. Every
press, toggle and edit is written to STATE_FILE as JSON ({"pressed": {...}, "checked": {...},
"entries": {...}}), so a test can see what an action did to which widget.
"""

from __future__ import annotations

import json
import sys

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # noqa: E402

STATE_FILE = sys.argv[1]
ROWS = int(sys.argv[2]) if len(sys.argv) > 2 else 10
state: dict[str, dict[str, object]] = {"pressed": {}, "checked": {}, "entries": {}}


def save() -> None:
    with open(STATE_FILE + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f)
    import os

    os.replace(STATE_FILE + ".tmp", STATE_FILE)


def pressed(_button: Gtk.Button, name: str) -> None:
    state["pressed"][name] = int(state["pressed"].get(name, 0)) + 1  # type: ignore[arg-type]
    save()


def toggled(button: Gtk.CheckButton, name: str) -> None:
    state["checked"][name] = button.get_active()
    save()


def edited(entry: Gtk.Entry, name: str) -> None:
    state["entries"][name] = entry.get_text()
    save()


window = Gtk.Window(title="Widgets")
window.set_default_size(900, 700)
window.move(0, 0)
outer = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=4)
top = Gtk.Box(spacing=8)
apply = Gtk.Button(label="Apply")
apply.connect("clicked", pressed, "Apply")
top.pack_start(apply, False, False, 0)
scale = Gtk.Scale.new_with_range(Gtk.Orientation.HORIZONTAL, 0, 100, 1)
scale.set_value(30)
scale.set_size_request(200, -1)
top.pack_start(scale, False, False, 0)
progress = Gtk.ProgressBar()
progress.set_fraction(0.5)
top.pack_start(progress, True, True, 0)
outer.pack_start(top, False, False, 0)
grid = Gtk.Grid(column_spacing=8, row_spacing=2)
for n in range(1, ROWS + 1):
    grid.attach(Gtk.Label(label=f"Row {n}"), 0, n, 1, 1)
    entry = Gtk.Entry()
    entry.set_text(f"value {n}")
    entry.connect("changed", edited, f"Entry {n}")
    grid.attach(entry, 1, n, 1, 1)
    check = Gtk.CheckButton(label=f"Option {n}")
    check.connect("toggled", toggled, f"Option {n}")
    grid.attach(check, 2, n, 1, 1)
    button = Gtk.Button(label=f"Press {n}")
    button.connect("clicked", pressed, f"Press {n}")
    grid.attach(button, 3, n, 1, 1)
scrolled = Gtk.ScrolledWindow()
scrolled.add(grid)
outer.pack_start(scrolled, True, True, 0)
window.add(outer)
window.connect("destroy", Gtk.main_quit)
window.show_all()
save()
Gtk.main()
