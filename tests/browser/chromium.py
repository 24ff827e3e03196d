"""Find the Chromium or Chrome that the browser tests drive, or say exactly what to install.

The one place for this lookup: tests/browser/conftest.py imports it, and `make chromium` runs it as
a script (`python tests/browser/chromium.py` prints the browser's path, or one line on stderr
saying what to install, and exits 1). Nothing here downloads a browser (never `playwright install`).

Order: $KVTUTOR_CHROMIUM (a path or a command name), then `chromium`, `chromium-browser`,
`google-chrome`, `google-chrome-stable` on PATH, then the macOS application bundles.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

ENV_VAR = "KVTUTOR_CHROMIUM"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MAC_APPS = (
    "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
    "/Applications/Chromium.app/Contents/MacOS/Chromium",
)
INSTALL = (
    "no Chromium or Chrome found (looked for $KVTUTOR_CHROMIUM, " + ", ".join(NAMES) + " on PATH, "
    "and the macOS apps): install Debian's chromium (`sudo apt-get install chromium`) or Google Chrome, "
    "or set KVTUTOR_CHROMIUM=/path/to/chrome"
)


class ChromiumNotFound(RuntimeError):
    """No usable browser; the message says what to install."""


def find_chromium(environ: Mapping[str, str] | None = None, mac_apps: Sequence[str] = MAC_APPS) -> str:
    """The path of the browser to drive: the override, else the first of NAMES on PATH, else a macOS app."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    override = env.get(ENV_VAR, "").strip()
    if override:
        found = shutil.which(override, path=path)
        if found is None:
            raise ChromiumNotFound(f"{ENV_VAR}={override!r} is not an executable file or a command on PATH")
        return os.path.abspath(found)
    for name in NAMES:
        found = shutil.which(name, path=path)
        if found is not None:
            return os.path.abspath(found)
    for app in mac_apps:
        if os.path.isfile(app) and os.access(app, os.X_OK):
            return app
    raise ChromiumNotFound(INSTALL)


def main() -> int:
    try:
        print(find_chromium())
    except ChromiumNotFound as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
