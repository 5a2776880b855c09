"""The fleet's heatmaps: node x figure, each cell the figure as a fraction of the fleet median,
one image per figure family (a GPU's host link, its memory, the GPU pairs, the host path,
NIXL), the nodes worst first.

Readable at a thousand nodes and more: a row of ROW_PX pixels per node with its name beside
it (the image grows tall, read from its top, where the worst nodes are), the figures' names
and the colour scale above the grid. Drawn cell by cell (PNG with Pillow, SVG as text), not
with a plot's axis ticks: a thousand tick labels took matplotlib minutes.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

LOW, HIGH = 0.7, 1.1  # the colour scale's ends (fraction of the fleet median)
COLOURS = "RdYlGn"  # matplotlib's red-yellow-green
MISSING = (224, 224, 224)  # a cell without a figure
ROW_PX, CELL_PX, CHAR_PX, PAD = 12, 36, 7, 8
TITLE_PX, BAR_PX = 20, 12  # the title line; the colour bar (its tick labels below it)

# The families: the figures read together; a figure of none is a family of its own.
FAMILIES = {"host-link": ("h2d", "d2h"), "memory": ("d2d", "ipc-ce", "ipc-handoff-4k"), "pairs": ("peer", "peer-ce"),
            "host": ("host-memcpy", "host-handoff", "host-pingpong-4k", "barrier"),
            "nixl": ("nixl-read", "nixl-host-read")}
FAMILY_OF = {figure: family for family, figures in FAMILIES.items() for figure in figures}


def families(columns: list[str]) -> dict[str, list[str]]:
    """The table's columns ('h2d@0', 'peer@0>1') by family, in FAMILIES' order."""
    found: dict[str, list[str]] = {}
    for c in columns:
        name = c.split("@", 1)[0]
        found.setdefault(FAMILY_OF.get(name, name), []).append(c)
    order = list(FAMILIES)
    return dict(sorted(found.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def draw(rows: list[dict], columns: list[str], path: Path, family: str = "") -> Path:
    """One family's heatmap into PATH (.png or .svg, by its suffix)."""
    layout = Layout(rows, columns, family)
    if path.suffix.lower() == ".svg":
        path.write_text(layout.svg(), encoding="utf-8")
    else:
        layout.png().save(path, compress_level=1)  # a tall image: fast beats small
    return path


class Layout:
    """Where everything goes, in pixels: the title, the colour bar, the column labels (vertical),
    then the grid, the node names left of it."""

    def __init__(self, rows: list[dict], columns: list[str], family: str = ""):
        self.nodes = [r["node"] for r in rows]
        self.columns = columns
        self.values = [[_fraction(r, c) for c in columns] for r in rows]
        self.left = PAD + CHAR_PX * max([len(n) for n in self.nodes] + [4]) + PAD
        self.top = TITLE_PX + BAR_PX + 2 * ROW_PX + PAD + CHAR_PX * max([len(c) for c in columns] + [4])
        self.title = f"{family or 'figures'}: {len(self.nodes)} nodes, worst first; fraction of the fleet median"
        self.width = max(self.left + CELL_PX * max(1, len(columns)), CHAR_PX * len(self.title)) + PAD
        self.height = self.top + ROW_PX * len(self.nodes) + PAD
        self.palette = _palette()

    def colour(self, value: float | None) -> tuple[int, int, int]:
        if value is None:
            return MISSING
        return self.palette[round(min(1.0, max(0.0, (value - LOW) / (HIGH - LOW))) * (len(self.palette) - 1))]

    def bar(self) -> list[tuple[int, float | None, str]]:
        """The colour bar: (x, value, tick label or '') per pixel column across the grid's width."""
        span = max(1, self.width - self.left - PAD)
        ticks = {round((t - LOW) / (HIGH - LOW) * (span - 1)): f"{t:.1f}" for t in (0.7, 0.8, 0.9, 1.0, 1.1)}
        return [(self.left + i, LOW + (HIGH - LOW) * i / (span - 1 or 1), ticks.get(i, "")) for i in range(span)]

    def png(self):
        import numpy as np
        from PIL import Image, ImageDraw

        image = Image.new("RGB", (self.width, self.height), "white")
        cells = np.array([[self.colour(v) for v in row] for row in self.values] or [[MISSING]], dtype=np.uint8)
        if self.values and self.columns:
            block = cells.repeat(ROW_PX, axis=0).repeat(CELL_PX, axis=1)
            block[::ROW_PX, :] = 255  # a white line between nodes, and between figures
            block[:, ::CELL_PX] = 255
            image.paste(Image.fromarray(block), (self.left, self.top))
        pen = ImageDraw.Draw(image)
        pen.text((PAD, 4), self.title, fill="black")
        for x, value, tick in self.bar():
            pen.line([(x, TITLE_PX), (x, TITLE_PX + BAR_PX)], fill=self.colour(value))
            if tick:
                pen.text((x - CHAR_PX, TITLE_PX + BAR_PX + 1), tick, fill="black")
        for j, c in enumerate(self.columns):  # each figure's name, written upwards, above its column
            label = Image.new("RGB", (CHAR_PX * len(c) + 4, ROW_PX), "white")
            ImageDraw.Draw(label).text((1, 0), c, fill="black")
            upright = label.rotate(90, expand=True)
            image.paste(upright, (self.left + j * CELL_PX + (CELL_PX - ROW_PX) // 2, self.top - 2 - upright.height))
        for i, node in enumerate(self.nodes):
            pen.text((PAD, self.top + i * ROW_PX), node, fill="black")
        return image

    def svg(self) -> str:
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
               f'font-family="sans-serif" font-size="10">',
               f'<rect width="{self.width}" height="{self.height}" fill="white"/>',
               f'<text x="{PAD}" y="14">{escape(self.title)}</text>']
        for x, value, tick in self.bar():
            out.append(f'<rect x="{x}" y="{TITLE_PX}" width="1" height="{BAR_PX}" fill="{_hex(self.colour(value))}"/>')
            if tick:
                out.append(f'<text x="{x - CHAR_PX}" y="{TITLE_PX + BAR_PX + 10}">{tick}</text>')
        for j, c in enumerate(self.columns):
            x, y = self.left + j * CELL_PX + CELL_PX // 2 + 4, self.top - 4
            out.append(f'<text transform="translate({x},{y}) rotate(-90)">{escape(c)}</text>')
        for i, (node, row) in enumerate(zip(self.nodes, self.values)):
            y = self.top + i * ROW_PX
            out.append(f'<text x="{PAD}" y="{y + ROW_PX - 2}">{escape(node)}</text>')
            out += [f'<rect x="{self.left + j * CELL_PX + 1}" y="{y + 1}" width="{CELL_PX - 1}" height="{ROW_PX - 1}" '
                    f'fill="{_hex(self.colour(v))}"/>' for j, v in enumerate(row)]
        return "\n".join(out + ["</svg>"]) + "\n"


def _palette(steps: int = 256) -> list[tuple[int, int, int]]:
    """The colour scale, LOW to HIGH in `steps` colours (the colour map looked up once)."""
    from matplotlib import colormaps

    scale = colormaps[COLOURS]
    return [tuple(round(255 * c) for c in scale(k / (steps - 1))[:3]) for k in range(steps)]  # type: ignore[misc]


def _fraction(row: dict, column: str) -> float | None:
    cell = row["figures"].get(column)
    return cell["of_median"] if cell else None


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#%02x%02x%02x" % rgb
