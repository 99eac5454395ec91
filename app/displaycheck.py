"""Before Qt picks a display: a Linux desktop that lacks a library Qt's X11 platform plugin
needs gets a sentence naming the package to install, instead of Qt's own abort ("could not
load the Qt platform plugin "xcb"…") with no word of what is missing.

The check loads the plugin exactly as Qt would (``dlopen`` of ``libqxcb.so``, which pulls in
its libraries) and reads the loader's complaint. It runs only where Qt will use X11.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from pathlib import Path

#: shared libraries Qt's xcb plugin and its Qt library load -> the Debian/Ubuntu package
PACKAGES = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-xinerama.so.0": "libxcb-xinerama0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1",
    "libdbus-1.so.3": "libdbus-1-3",
}
_MISSING = re.compile(r"(lib[\w.+-]+?\.so(?:\.\d+)*): cannot open shared object file")


def uses_xcb() -> bool:
    """Whether Qt will open its window through X11 here."""
    if not sys.platform.startswith("linux"):
        return False
    chosen = os.environ.get("QT_QPA_PLATFORM", "")
    if chosen:
        return chosen.split(";")[0].split(":")[0] == "xcb"
    return os.environ.get("XDG_SESSION_TYPE") != "wayland" or not os.environ.get("WAYLAND_DISPLAY")


def describe(loader_error: str) -> str:
    """What to tell a person for the dynamic loader's ``loader_error``."""
    m = _MISSING.search(loader_error)
    if m is None:
        return (
            f"MTP Studio's window cannot start: Qt's X11 platform plugin does not load ({loader_error}). "
            "Commands without a window still work (mtp-studio --help)."
        )
    lib = m.group(1)
    pkg = PACKAGES.get(lib)
    how = f"install it (Debian/Ubuntu: sudo apt install {pkg})" if pkg else "install the package that provides it"
    return (
        f"MTP Studio's window needs {lib}, which is not installed (Qt's X11 platform plugin cannot load "
        f"without it): {how}, then start MTP Studio again. Commands without a window still work "
        "(mtp-studio serve, mtp-studio --help)."
    )


def xcb_problem() -> str | None:
    """None when Qt's X11 plugin loads (or Qt will not use it); else what to install."""
    if not uses_xcb():
        return None
    import PySide6

    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    if not plugin.exists():
        return None  # another layout (a frozen app): Qt says what it says
    try:
        ctypes.CDLL(str(plugin))
    except OSError as e:
        return describe(str(e))
    return None
