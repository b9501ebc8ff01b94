"""The accessibility tree: our reader against an OSWorld-style pyatspi walk of the same windows, in one run.

For each window (the GTK test window at several sizes, mousepad, chromium on a page, LibreOffice Calc), both
read the whole tree (every element, shown or not) with what an agent is given: role, name, states, box,
text and value. The baseline walks it as OSWorld's server does, one pyatspi call per property per element
(Debian's python3-pyatspi, in Debian's Python); ours is :class:`hci_envs.desktop.a11y.Accessibility`. Both
talk to the same bus and the same app, one after the other.

    .venv/bin/python bench/bench_a11y.py [--quick]

Target (issue "Real applications"): a 300-element GTK window in at most 100 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from common import ROOT, Report, measure

WIDGETS = ROOT / "tests" / "apps" / "gtk_widgets.py"
SYSTEM_PYTHON = "/usr/bin/python3"

# The baseline: a recursive pyatspi walk reading each element's properties, one call each (OSWorld's way).
PYATSPI_WALK = r"""
import json, sys, time
import pyatspi

def node(acc, depth):
    out = {"role": acc.getRoleName(), "name": acc.name, "states": [str(s) for s in acc.getState().getStates()]}
    try:
        c = acc.queryComponent()
        out["box"] = list(c.getPosition(pyatspi.XY_SCREEN)) + list(c.getSize())
    except NotImplementedError:
        pass
    try:
        t = acc.queryText()
        out["text"] = t.getText(0, min(t.characterCount, 2000))
    except NotImplementedError:
        pass
    try:
        out["value"] = acc.queryValue().currentValue
    except NotImplementedError:
        pass
    if depth < 64:
        out["children"] = [node(acc.getChildAtIndex(i), depth + 1) for i in range(min(acc.childCount, 2000))]
    return out

def count(n):
    return 1 + sum(count(c) for c in n.get("children", []))

runs = int(sys.argv[1])
desktop = pyatspi.Registry.getDesktop(0)
times, total = [], 0
for _ in range(runs + 2):
    start = time.perf_counter()
    trees = [node(app, 0) for app in desktop]
    times.append((time.perf_counter() - start) * 1000)
    total = sum(count(t) for t in trees)
print(json.dumps({"ms": times[2:], "nodes": total}))
"""


def baseline(desktop, runs: int) -> tuple[list[float], int]:
    env = {"PATH": os.environ["PATH"], "DISPLAY": desktop.display, "AT_SPI_BUS_ADDRESS": desktop._a11y_bus.address,
           "HOME": tempfile.gettempdir()}
    out = subprocess.run([SYSTEM_PYTHON, "-c", PYATSPI_WALK, str(runs)], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"the pyatspi walk failed (apt-get install python3-pyatspi): {out.stderr[-800:]}")
    data = json.loads(out.stdout.strip().splitlines()[-1])
    return data["ms"], data["nodes"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer runs and windows")
    args = parser.parse_args()
    runs = 5 if args.quick else 15
    report = Report("a11y")
    from hci_envs import AppState, StartState
    from hci_envs.desktop import Desktop
    from hci_envs.desktop.a11y import Query

    home = Path(tempfile.mkdtemp(prefix="hci-envs-bench-a11y-"))
    page = home / "page.html"
    page.write_text("<h1>Orders</h1>" + "".join(
        f"<p>Order {i}: <a href='#{i}'>open</a> <button>Ship {i}</button> <input value='note {i}'></p>"
        for i in range(40)))
    windows = [(f"gtk {rows} rows", [SYSTEM_PYTHON, str(WIDGETS), str(home / "w.json"), str(rows)], {})
               for rows in ((10, 75) if args.quick else (10, 40, 75, 150))]
    windows += [("mousepad", ["mousepad"], {}),
                ("chromium page", ["chromium", "--no-sandbox", "--no-first-run", "--password-store=basic",
                                   "--disable-gpu", "--force-renderer-accessibility",
                                   f"--user-data-dir={home}/chromium", f"file://{page}"], {})]
    if not args.quick:
        windows.append(("libreoffice calc", ["soffice", "--calc", "--norestore", "--nologo",
                                             f"-env:UserInstallation=file://{home}/lo"],
                        {"SAL_USE_VCLPLUGIN": "gtk3"}))
    for label, command, env in windows:
        print(f"{label}:")
        state = StartState(apps=[AppState(command=command, name=label, env=env, timeout=120)])
        with Desktop(state, home=str(home)) as desktop:
            time.sleep(3)  # browsers and office suites go on building their trees after the first paint
            assert desktop.accessibility is not None, desktop.no_accessibility
            query = Query(visible_only=False, max_nodes=10_000)
            first = time.perf_counter()
            tree = desktop.accessibility.tree(query)
            first_ms = (time.perf_counter() - first) * 1000
            ours = report.add(f"{label}: ours, whole tree", measure(lambda: desktop.accessibility.tree(query), runs))
            visible = report.add(f"{label}: ours, on screen only",
                                 measure(lambda: desktop.accessibility.tree(Query()), runs))
            samples, nodes = baseline(desktop, runs)
            base = report.add(f"{label}: pyatspi walk, whole tree", samples)
            report.value(f"{label}: elements (ours / pyatspi)", f"{len(tree.nodes)} / {nodes}")
            report.value(f"{label}: first read (activates the app's cache)", f"{first_ms:.1f} ms")
            report.value(f"{label}: pyatspi / ours", f"{base['p50_ms'] / ours['p50_ms']:.1f}x")
            report.value(f"{label}: ms per element (ours)", f"{ours['p50_ms'] / max(len(tree.nodes), 1):.3f}")
            del visible
    report.save()


if __name__ == "__main__":
    main()
