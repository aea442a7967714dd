"""Inline SVG, written as text: the few shapes the HTML report draws, every string escaped.

:class:`Svg` collects rectangles, lines and text and renders one ``<svg>`` element to put inside
an HTML page (no JavaScript, no external file, nothing fetched). Every piece of text and every
attribute value passes through :func:`esc`, so a kernel name or an error message from the tuning
database can never become markup. Each shape may carry a ``<title>`` (the browser shows it on
hover) and ``data-*`` attributes (for tests and for people reading the page's source).
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping

__all__ = ["Svg", "esc", "nice_ticks"]


def esc(value: object) -> str:
    """``value`` as text safe inside HTML/SVG content and double-quoted attribute values."""
    return html.escape(str(value), quote=True)


def _attrs(attrs: Mapping[str, object | None]) -> str:
    return "".join(
        f' {name.rstrip("_").replace("_", "-")}="{esc(_num(value))}"'
        for name, value in attrs.items()
        if value is not None
    )


def _num(value: object) -> object:
    return round(value, 2) if isinstance(value, float) else value


class Svg:
    """One SVG picture, ``width`` x ``height`` pixels (it scales down with the page)."""

    def __init__(self, width: float, height: float, label: str, css_class: str) -> None:
        self.width = width
        self.height = height
        self.label = label
        self.css_class = css_class
        self._parts: list[str] = []

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        *,
        fill: str,
        title: str | None = None,
        **attrs: object | None,
    ) -> None:
        shape = f"<rect{_attrs({'x': x, 'y': y, 'width': max(w, 0.0), 'height': h, 'fill': fill, **attrs})}"
        self._parts.append(shape + (f"><title>{esc(title)}</title></rect>" if title else "/>"))

    def line(
        self, x1: float, y1: float, x2: float, y2: float, *, stroke: str, **attrs: object | None
    ) -> None:
        self._parts.append(
            f"<line{_attrs({'x1': x1, 'y1': y1, 'x2': x2, 'y2': y2, 'stroke': stroke, **attrs})}/>"
        )

    def text(
        self,
        x: float,
        y: float,
        content: str,
        *,
        anchor: str = "start",
        title: str | None = None,
        **attrs: object | None,
    ) -> None:
        tip = f"<title>{esc(title)}</title>" if title else ""
        self._parts.append(
            f"<text{_attrs({'x': x, 'y': y, 'text_anchor': anchor, **attrs})}>{tip}{esc(content)}</text>"
        )

    def render(self) -> str:
        head = _attrs(
            {
                "xmlns": "http://www.w3.org/2000/svg",
                "class": self.css_class,
                "width": self.width,
                "height": self.height,
                "viewBox": f"0 0 {_num(float(self.width))} {_num(float(self.height))}",
                "role": "img",
                "aria_label": self.label,
            }
        )
        return f"<svg{head}>" + "".join(self._parts) + "</svg>"


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (about ``count`` of them)."""
    if not math.isfinite(high) or high <= 0:
        return [0.0, 1.0]
    raw = high / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < high - 1e-12 * high:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks
