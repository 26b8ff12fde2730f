#!/usr/bin/env python3
"""Check that report.html, opened in headless Chromium, actually shows its plots.

    python docs/check_report_html.py reports/demo/report.html [--screenshot shot.png]

Renders the page with ``chromium --headless --screenshot`` (device scale 1, a window tall
enough for the plot gallery), then, for every PNG embedded in the page, takes its most
frequent saturated colours (plot marks: points, bars, lines; colours no other plot uses
first) and counts those exact colours in the screenshot. The report shows images at their
natural size, so a plot that is drawn puts at least as many pixels of those colours on
screen as it has itself (summed over the plots that share a colour); a broken, missing or
blank image does not. Exit 0 when every plot is visible, 1 otherwise (the reason printed),
2 when Chromium is missing.

Needs ``chromium`` on PATH (Debian: ``apt-get install -y chromium``) and matplotlib (for
PNG decoding, already a dependency of ncclsweep).
"""

from __future__ import annotations

import argparse
import base64
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

IMG_RE = re.compile(r'<img\b[^>]*\bsrc="data:image/png;base64,([A-Za-z0-9+/=]+)"', re.I)
MIN_SATURATION = 60  # max-min over RGB: leaves out white, greys, black text and anti-aliased edges
COLOURS_PER_IMAGE = 3
MIN_PIXELS = 40  # a colour must cover at least this many pixels of its plot to be a mark
SHOWN_FRACTION = 0.8  # of the expected pixels that must appear in the screenshot


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _rgb_counts(png: bytes) -> Counter:
    import matplotlib.image as mpimg
    import numpy as np

    arr = mpimg.imread(io.BytesIO(png), format="png")
    if arr.dtype != np.uint8:
        arr = (arr * 255 + 0.5).astype(np.uint8)
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    rgb = arr[..., :3].reshape(-1, 3)
    if arr.shape[-1] == 4:  # only opaque pixels keep their exact colour on screen
        rgb = rgb[arr[..., 3].reshape(-1) == 255]
    sat = rgb.max(axis=1).astype(int) - rgb.min(axis=1).astype(int)
    rgb = rgb[sat >= MIN_SATURATION]
    packed = (rgb[:, 0].astype(np.int64) << 16) | (rgb[:, 1].astype(np.int64) << 8) | rgb[:, 2]
    values, counts = np.unique(packed, return_counts=True)
    return Counter(dict(zip(values.tolist(), counts.tolist())))


def _png_height(png: bytes) -> int:
    return int.from_bytes(png[20:24], "big") if png[:8] == b"\x89PNG\r\n\x1a\n" else 0


def screenshot(html_path: Path, out_png: Path, width: int = 1600, height: int = 3000,
               chromium: str | None = None, timeout_s: float = 90.0) -> None:
    """Render ``html_path`` in headless Chromium into ``out_png`` (raises on failure)."""
    exe = chromium or find_chromium()
    if exe is None:
        raise FileNotFoundError("chromium not found on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="ncclsweep-chromium-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--hide-scrollbars", "--force-device-scale-factor=1", "--force-color-profile=srgb",
               f"--user-data-dir={profile}", f"--window-size={width},{height}", f"--screenshot={out_png}",
               "--virtual-time-budget=5000", html_path.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, "HOME": profile})
    if not out_png.exists() or out_png.stat().st_size == 0:
        raise RuntimeError(f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")


def check_report_html(html_path: str | Path, screenshot_path: str | Path | None = None,
                      chromium: str | None = None) -> dict:
    """Screenshot the report and check every embedded plot is visible.

    Returns ``{"ok": bool, "images": n, "missing": [index, ...], "details": [...],
    "screenshot": path}``; ``details`` has, per image, the colours checked with expected and
    seen pixel counts.
    """
    html_path = Path(html_path)
    text = html_path.read_text()
    images = [base64.b64decode(m) for m in IMG_RE.findall(text)]
    if screenshot_path is None:
        screenshot_path = html_path.with_name(html_path.stem + ".screenshot.png")
    screenshot_path = Path(screenshot_path)
    if screenshot_path.exists():
        screenshot_path.unlink()
    # tall enough for the gallery even if every plot stacked vertically
    height = max(3000, 1500 + sum(_png_height(png) for png in images))
    screenshot(html_path, screenshot_path, height=height, chromium=chromium)
    seen = _rgb_counts(screenshot_path.read_bytes())
    per_image = [_rgb_counts(png) for png in images]
    total: Counter = Counter()
    for counts in per_image:
        total.update(counts)
    details, missing = [], []
    for i, counts in enumerate(per_image):
        # prefer colours no other plot uses, so a missing plot is named, not its neighbours
        ranked = sorted(((c, n) for c, n in counts.items() if n >= MIN_PIXELS),
                        key=lambda cn: (total[cn[0]] > cn[1], -cn[1]))
        marks = ranked[:COLOURS_PER_IMAGE]
        checks = [{"colour": f"#{c:06x}", "in_plot": n, "expected": total[c], "seen": seen.get(c, 0)} for c, n in marks]
        visible = bool(checks) and all(ch["seen"] >= SHOWN_FRACTION * ch["expected"] for ch in checks)
        details.append({"image": i, "visible": visible, "colours": checks})
        if not visible:
            missing.append(i)
    return {"ok": bool(images) and not missing, "images": len(images), "missing": missing, "details": details,
            "screenshot": str(screenshot_path)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", help="path to report.html")
    parser.add_argument("--screenshot", help="where to save the screenshot (default: next to the html)")
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print("chromium not found on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    result = check_report_html(args.html, args.screenshot)
    for d in result["details"]:
        state = "visible" if d["visible"] else "NOT VISIBLE"
        cols = ", ".join(f"{c['colour']} {c['seen']}/{c['expected']}px" for c in d["colours"]) or "no plot marks"
        print(f"plot {d['image'] + 1}: {state} ({cols})")
    if not result["images"]:
        print("no embedded PNG images in the page")
    print(f"screenshot: {result['screenshot']}")
    print("OK: every plot shows" if result["ok"] else "FAIL: some plots do not show")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
