"""The suite's apps as start-state entries: how each real app is started for a task, in a fresh home, fast and
the same every time (no first-run dialogs, tips, restored sessions or autosaves), with its accessibility on.

Each function returns an app dict for ``StartState.apps``; ``name`` is the app's label, which reports, the
``app`` filter of the accessibility tree and the browser check use. :func:`seed_files` gives the files an app
needs in the home before it starts (its settings); a template's task gets them for the apps it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: chromium as a task starts it: a profile in the home; no sandbox (the agent's account is the boundary, and
#: the pages are the task's own); the web page's accessibility on; nothing shown but the page (--test-type
#: hides the bar that would warn about --no-sandbox).
CHROMIUM = [
    "chromium", "--no-sandbox", "--test-type", "--no-first-run", "--no-default-browser-check",
    "--password-store=basic", "--disable-gpu", "--disable-dev-shm-usage", "--force-renderer-accessibility",
    "--disable-sync",
    "--disable-background-networking", "--disable-component-update", "--hide-crash-restore-bubble",
    "--disable-features=Translate,MediaRouter,OptimizationHints", "--window-position=0,0",
    "--window-size=1280,800", "--user-data-dir={home}/.config/chromium",
]
LIBREOFFICE_PROFILE = ".config/libreoffice-task"

#: LibreOffice as an installation that has been started once: no first-run dialogs, tips, bars or crash reports.
LIBREOFFICE_STARTED_ONCE = [
    ("/org.openoffice.Setup/Office", "ooSetupInstCompleted", "true"),
    ("/org.openoffice.Setup/Product", "ooSetupLastVersion", "7.4"),
    ("/org.openoffice.Setup/Product", "LastTimeGetInvolvedShown", "4102444800"),
    ("/org.openoffice.Setup/Product", "LastTimeDonateShown", "4102444800"),
    ("/org.openoffice.Office.Common/Misc", "FirstRun", "false"),
    ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "false"),
    ("/org.openoffice.Office.Common/Misc", "UseSystemFileDialog", "true"),
    ("/org.openoffice.Office.Common/Misc", "CrashReport", "false"),
    ("/org.openoffice.Office.Common/Load", "ShowOfficeUpdateDialog", "false"),
    ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "false"),
]
# The suite's LibreOffice besides: no autosave, recovery, backups or "keep format?" question; and typing that
# stays as typed (no AutoInput completion in Calc, no autocorrection of capitals and quotes).
_XCU_ITEMS = LIBREOFFICE_STARTED_ONCE + [
    ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "AutoSave", "false"),
    ("/org.openoffice.Office.Common/Save/Document", "CreateBackup", "false"),
    ("/org.openoffice.Office.Recovery/AutoSave", "Enabled", "false"),
    ("/org.openoffice.Office.Recovery/AutoSave", "UserAutoSaveEnabled", "false"),
    ("/org.openoffice.Office.Calc/Input", "AutoInput", "false"),
    ("/org.openoffice.Office.Calc/Input", "ReplaceCellsWarning", "false"),
    ("/org.openoffice.Office.Calc/Layout/Window", "SearchSummary", "false"),
    ("/org.openoffice.Office.Writer/AutoFunction/Completion", "Enable", "false"),
    ("/org.openoffice.Office.Common/AutoCorrect", "CapitalAtStartSentence", "false"),
    ("/org.openoffice.Office.Common/AutoCorrect", "ReplaceDoubleQuote", "false"),
    ("/org.openoffice.Office.Common/AutoCorrect", "ReplaceSingleQuote", "false"),
    ("/org.openoffice.Office.Writer/AutoFunction/Format/Option", "CapitalAtStartSentence", "false"),
]


def libreoffice_profile(profile: str, items: list[tuple[str, str, str]]) -> dict[str, str]:
    """The files of a LibreOffice user profile at ``profile`` (relative to the home) holding ``items`` (path,
    property, value) as its settings."""
    text = "".join(f'<item oor:path="{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop>'
                   "</item>\n" for path, name, value in items)
    files = {f"{profile}/user/registrymodifications.xcu": (
        '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
        'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{text}</oor:items>\n")}
    # The installation's build id: without it LibreOffice takes the profile for an old one and starts twice.
    try:
        for line in Path("/usr/lib/libreoffice/program/versionrc").read_text().splitlines():
            if line.startswith("buildid="):
                files[f"{profile}/user/extensions/buildid"] = line.split("=", 1)[1]
    except OSError:
        pass
    return files


def _libreoffice_settings() -> dict[str, str]:
    return libreoffice_profile(LIBREOFFICE_PROFILE, _XCU_ITEMS)


_SEEDS: dict[str, Any] = {
    "editor": lambda: {".config/glib-2.0/settings/keyfile": (
        "[org/xfce/mousepad/preferences/file]\nsession-restore='never'\nautosave-timer=uint32 0\n\n"
        "[org/xfce/mousepad/preferences/window]\nremember-size=false\nremember-position=false\n"
        "remember-state=false\n")},
    "writer": _libreoffice_settings,
    "calc": _libreoffice_settings,
    "browser": lambda: {
        ".config/chromium/First Run": "",
        ".config/chromium/Default/Preferences": (
            '{"browser": {"has_seen_welcome_page": true, "check_default_browser": false}, '
            '"download": {"prompt_for_download": false, "directory_upgrade": true}, "translate": {"enabled": false}, '
            '"credentials_enable_service": false, "signin": {"allowed": false}, '
            '"autofill": {"profile_enabled": false, "credit_card_enabled": false}}')},
    "files": lambda: {
        ".config/pcmanfm/default/pcmanfm.conf": (
            "[config]\nbm_open_method=0\n\n[volume]\nmount_on_startup=0\nmount_removable=0\nautorun=0\n\n"
            "[ui]\nalways_show_tabs=0\nmaximized=1\nwin_width=1280\nwin_height=800\nsplitter_pos=150\n"
            "side_pane_mode=places\nview_mode=icon\nshow_hidden=0\nsort=name;ascending;\nshow_statusbar=1\n"),
        ".config/libfm/libfm.conf": (
            "[config]\nsingle_click=0\nuse_trash=1\nconfirm_del=1\nconfirm_trash=0\nquick_exec=1\n"
            "terminal=xterm -e %s\nthumbnail_local=0\n\n[places]\nplaces_home=1\nplaces_desktop=0\nplaces_root=1\n"
            "places_computer=0\nplaces_trash=1\nplaces_applications=0\nplaces_network=0\nplaces_unmounted=0\n")},
    "calculator": lambda: {".config/galculator/galculator.conf": (
        "[general]\nmode=0\ndefault_notation_mode=0\ndefault_number_base=0\ndefault_angle_base=1\n"
        "remembers_display=false\nshow_menu_bar=true\n")},
}


def seed_files(labels: list[str]) -> dict[str, str]:
    """The settings files the apps of these labels need in the home before they start."""
    files: dict[str, str] = {}
    for label in labels:
        if label in _SEEDS:
            files.update(_SEEDS[label]())
    return files


def editor(path: str | None = None) -> dict[str, Any]:
    """mousepad (GTK), on a file of the home; its settings in a key file (no session bus to keep them)."""
    return {"command": ["mousepad", *([f"{{home}}/{path}"] if path else [])], "name": "editor", "timeout": 30,
            "env": {"GSETTINGS_BACKEND": "keyfile"}}


def _office(kind: str, path: str | None) -> dict[str, Any]:
    return {
        # --nologo also keeps away the tip of the day and the first-run bars, whatever the profile says
        "command": ["soffice", f"--{kind}", "--norestore", "--nologo", "--nolockcheck",
                    f"-env:UserInstallation=file://{{home}}/{LIBREOFFICE_PROFILE}",
                    *([f"{{home}}/{path}"] if path else [])],
        "name": kind, "timeout": 120, "ready": "accessible",  # its menus join the tree after it paints
        # the GTK front end (LibreOffice's own X11 one exposes no accessibility tree)
        "env": {"SAL_USE_VCLPLUGIN": "gtk3"},
    }


def writer(path: str | None = None) -> dict[str, Any]:
    """LibreOffice Writer, on a document of the home (or a new one)."""
    return _office("writer", path)


def calc(path: str | None = None) -> dict[str, Any]:
    """LibreOffice Calc, on a workbook of the home (or a new one). A CSV opens without the import dialog."""
    app = _office("calc", None)
    if path is not None:
        if path.endswith(".csv"):
            app["command"].append("--infilter=Text - txt - csv (StarCalc):44,34,76,1")
        app["command"].append(f"{{home}}/{path}")
    return app


#: LibreOffice 7.4 places its own widgets (toolbars, cells, paragraphs) 25 px too high in the accessibility tree
#: until its window has taken a click; a task's setup clicks the middle of the document, then goes back to the
#: start (the first cell, or the first character), which changes nothing.
OFFICE_SETUP = [{"type": "wait", "ms": 300}, {"type": "click", "x": 640, "y": 450}, {"type": "key", "keys": "ctrl+Home"}]


def browser(page: str = "index.html") -> dict[str, Any]:
    """chromium on the task's local web site (the home's ``site`` folder, served inside the desktop)."""
    return {"command": ["{python}", "-m", "hci_envs.tasks.apps.website", "{home}/site", "--", *CHROMIUM,
                        f"{{url}}/{page}"],
            "name": "browser", "timeout": 60}


def files(folder: str = "") -> dict[str, Any]:
    """pcmanfm (GTK 2, its accessibility through GTK_MODULES), showing a folder of the home, maximized. A
    second pcmanfm on the same display would hand its folder to the first and exit: use one per task."""
    return {"command": ["pcmanfm", f"{{home}}/{folder}".rstrip("/")], "name": "files", "timeout": 30,
            "env": {"GTK_MODULES": "gail:atk-bridge"}}


def calculator() -> dict[str, Any]:
    """galculator (GTK) in its basic mode; its display's value is the text of an unnamed text element."""
    return {"command": ["galculator"], "name": "calculator", "timeout": 30}


def terminal() -> dict[str, Any]:
    """xterm with a readable font, bash in the home (xterm exposes no accessibility tree)."""
    return {"command": ["xterm", "-fa", "DejaVu Sans Mono", "-fs", "11", "-geometry", "110x32+0+0", "-e", "bash"],
            "name": "terminal", "timeout": 30}
