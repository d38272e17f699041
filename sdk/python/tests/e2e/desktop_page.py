"""What the desktop tests read from a screenshot, shared by test_desktop.py (Lizard's surface) and
test_e2b_desktop.py (E2B's Desktop SDK): both open a page with a magenta button and click its centre."""

from __future__ import annotations

import io
from typing import Optional

from PIL import Image


def magenta_centre(png: bytes) -> Optional[tuple[int, int]]:
    """The centre of the magenta button in a screenshot, or None while the page has not painted it."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    px = img.load()
    xs, ys = [], []
    for y in range(0, h, 4):
        for x in range(0, w, 4):
            r, g, b = px[x, y]
            if r > 240 and g < 20 and b > 240:
                xs.append(x)
                ys.append(y)
    if len(xs) < 100:
        return None
    return (min(xs) + max(xs)) // 2, (min(ys) + max(ys)) // 2
