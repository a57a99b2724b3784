"""A plan as a picture: ``Plan.to_svg()`` writes SVG directly (no plotting library).

Three panels under a legend of the plan's key facts:

- **the index space**: the op's two axes (``Plan.index_axes()``, e.g. channels x rows of a channel),
  each core's share (``Plan.shares()``) a rectangle in the core's own colour, its UB blocks as lines
  inside it. Every share is drawn, whatever its size, and carries its ranges as ``data-`` attributes
  (a test reads them back); labels go only where they fit, and runs of cores with shares of the same
  size are labelled once ("cores 0-31: 3 channels x 98 rows").
- **the reduction tree**: its levels from the lanes out to the result, each with its fan-in and how it
  combines; an atomic level says that its partials are added in arrival order, with an example order
  where the caller gives one.
- **the workspace**: the system region and each user region as a bar, with offsets and sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape as _html_escape


def _escape(text: str) -> str:
    """``&``, ``<`` and ``>`` as XML entities (``xml.sax.saxutils.escape``, without the import of ``xml.sax``
    that every ``import normkern`` would pay for)."""
    return _html_escape(text, quote=False)


WIDTH = 960
_MARGIN = 20
_SPACE_HEIGHT = 320
_LABEL_MIN_PX = 12
#: A share's UB blocks are drawn as lines up to this many; past it only its label counts them.
_EDGES_MAX = 64
#: Runs of cores listed under the index space (each: its cores, share size, UB blocks, where it starts).
_RUNS_LISTED = 8


@dataclass(frozen=True)
class Share:
    """One core's part of the index space in one phase: rows ``[rows[0], rows[1])`` x columns
    ``[cols[0], cols[1])``; ``block_edges`` are the columns inside it where a new UB block starts."""

    core: int
    phase: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    block_edges: tuple[int, ...] = ()

    @property
    def size(self) -> tuple[int, int]:
        return self.rows[1] - self.rows[0], self.cols[1] - self.cols[0]


def core_colour(core: int) -> str:
    """Adjacent cores far apart on the colour wheel (the golden angle), two lightnesses alternating."""
    return f"hsl({core * 137.508 % 360:.1f},62%,{68 if core % 2 else 58}%)"


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'font-family="monospace">{_escape(text)}</text>')


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}".replace(".0 ", " ")
    return f"{n} B"


def _runs(shares: list[Share]) -> list[tuple[int, int, Share]]:
    """Consecutive shares (in drawing order) of the same phase and size: ``(first, last, example)``."""
    runs: list[tuple[int, int, Share]] = []
    for i, share in enumerate(shares):
        if runs and share.phase == runs[-1][2].phase and share.size == runs[-1][2].size \
                and share.core == shares[runs[-1][1]].core + 1:
            runs[-1] = (runs[-1][0], i, runs[-1][2])
        else:
            runs.append((i, i, share))
    return runs


def _space(plan, top: float) -> tuple[list[str], float]:
    (row_name, rows), (col_name, cols) = plan.index_axes()
    shares = sorted(plan.shares(), key=lambda s: (s.phase, s.core, s.rows, s.cols))
    left, width, height = _MARGIN + 70, WIDTH - 2 * _MARGIN - 70, _SPACE_HEIGHT
    if rows <= 1:
        height = 90
    out = [_text(_MARGIN, top + 14, f"index space: {rows} {row_name} x {cols} {col_name}" if rows > 1
                 else f"index space: {cols} {col_name}", 13, weight="bold")]
    top += 24
    sx, sy = width / max(cols, 1), height / max(rows, 1)
    out.append(f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="#f4f4f4" stroke="#999"/>')
    for share in shares:
        x, y = left + share.cols[0] * sx, top + share.rows[0] * sy
        w, h = share.size[1] * sx, share.size[0] * sy
        out.append(f'<rect class="share" data-core="{share.core}" data-phase="{share.phase}" '
                   f'data-rows="{share.rows[0]},{share.rows[1]}" data-cols="{share.cols[0]},{share.cols[1]}" '
                   f'x="{x:.2f}" y="{y:.2f}" width="{w:.2f}" height="{h:.2f}" fill="{core_colour(share.core)}" '
                   f'stroke="#333" stroke-width="{0.6 if min(w, h) > 3 else 0}"/>')
        for edge in share.block_edges if len(share.block_edges) <= _EDGES_MAX else ():
            ex = left + edge * sx
            out.append(f'<line class="block" x1="{ex:.2f}" y1="{y:.2f}" x2="{ex:.2f}" y2="{y + h:.2f}" '
                       'stroke="#fff" stroke-width="0.8" stroke-dasharray="3,2"/>')
    runs = _runs(shares)
    listed = []
    for first, last, share in runs:
        run = shares[first:last + 1]
        y0 = top + min(s.rows[0] for s in run) * sy
        y1 = top + max(s.rows[1] for s in run) * sy
        x0 = left + min(s.cols[0] for s in run) * sx
        x1 = left + max(s.cols[1] for s in run) * sx
        cores = f"core {share.core}" if first == last else f"cores {share.core}-{run[-1].core}"
        phase = f"{plan.phase_name(share.phase)}: " if any(s.phase for s in shares) else ""
        size = f"{share.size[1]} {col_name}" if rows <= 1 else f"{share.size[0]} x {share.size[1]}"
        label = f"{phase}{cores}: {size}" + (" each" if first != last else "")
        if share.block_edges:
            label += f", {len(share.block_edges) + 1} UB blocks"
        listed.append(f"{label} (from {col_name} {share.cols[0]})" if rows <= 1 else
                      f"{label} (from {row_name} {share.rows[0]}, {col_name} {share.cols[0]})")
        if y1 - y0 >= _LABEL_MIN_PX and x1 - x0 >= 7 * len(label):
            out.append(_text((x0 + x1) / 2, (y0 + y1) / 2 + 4, label, 11, "middle"))
    for value, where in ((0, top + 10), (rows, top + height)):
        if rows > 1:
            out.append(_text(left - 6, where, str(value), 10, "end"))
    if row_name:
        out.append(f'<g transform="rotate(-90 {left - 10} {top + height / 2:.1f})">'
                   + _text(left - 10, top + height / 2, row_name, 10, "middle") + "</g>")
    out.append(_text(left, top + height + 14, "0", 10))
    out.append(_text(left + width, top + height + 14, f"{cols} {col_name}", 10, "end"))
    if len(listed) > _RUNS_LISTED:  # too many runs to list: each phase summed up instead
        listed = []
        for phase in sorted({s.phase for s in shares}):
            inside = [s for s in shares if s.phase == phase]
            sizes = {}
            for s in inside:
                sizes[s.size] = sizes.get(s.size, 0) + 1
            cores = len({s.core for s in inside})
            listed.append(f"{plan.phase_name(phase)}: {len(inside)} shares on {cores} cores, sizes "
                          + ", ".join(f"{r} x {c} ({n})" for (r, c), n in sorted(sizes.items(), reverse=True)[:6])
                          + (" ..." if len(sizes) > 6 else ""))
    for i, line in enumerate(listed):
        out.append(_text(_MARGIN, top + height + 30 + 14 * i, line, 11))
    return out, top + height + 24 + 14 * len(listed)


def _tree(plan, top: float, arrival) -> tuple[list[str], float]:
    levels = plan.tree.levels
    if not levels:
        return [_text(_MARGIN, top + 14, "reduction tree: none (elementwise: no sums)", 13, weight="bold")], top + 24
    out = [_text(_MARGIN, top + 14, "reduction tree (innermost level first)", 13, weight="bold")]
    top += 24
    boxes = [*levels, None]
    gap = 24
    w = (WIDTH - 2 * _MARGIN - gap * (len(boxes) - 1)) / len(boxes)
    h = 64
    for i, level in enumerate(boxes):
        x = _MARGIN + i * (w + gap)
        atomic = level is not None and level.combine.value == "atomic"
        fill = "#f8d0c8" if atomic else "#dde8f4" if level is not None else "#e2f0d9"
        out.append(f'<rect class="level" x="{x:.1f}" y="{top}" width="{w:.1f}" height="{h}" rx="6" fill="{fill}" '
                   'stroke="#666"/>')
        if level is None:
            out.append(_text(x + w / 2, top + h / 2 + 4, "result", 12, "middle", "bold"))
            continue
        out.append(_text(x + w / 2, top + 18, f"{level.name} x{level.fan_in}", 12, "middle", "bold"))
        how = level.combine.value
        if level.name == "lanes":
            how = plan.tree.lane_order.value.replace("_", " ")
        out.append(_text(x + w / 2, top + 36, how, 11, "middle"))
        if atomic and arrival is not None:
            order = ", ".join(str(a) for a in list(arrival)[:8]) + (" ..." if len(arrival) > 8 else "")
            out.append(_text(x + w / 2, top + 54, f"arrival e.g. {order}", 10, "middle"))
        elif atomic:
            out.append(_text(x + w / 2, top + 54, "in arrival order", 10, "middle"))
        out.append(f'<line x1="{x + w:.1f}" y1="{top + h / 2}" x2="{x + w + gap - 4:.1f}" y2="{top + h / 2}" '
                   'stroke="#444" marker-end="url(#arrow)"/>')
    notes = [f"{level.name}: {level.detail}" for level in levels if level.detail]
    for j, note in enumerate(notes):
        out.append(_text(_MARGIN, top + h + 16 + 14 * j, note[:150], 10))
    return out, top + h + 20 + 14 * len(notes)


def _workspace(plan, top: float) -> tuple[list[str], float]:
    ws = plan.workspace
    out = [_text(_MARGIN, top + 14, f"workspace: {_bytes(ws.total_bytes)} ({ws.system_bytes} B system + "
                 f"{ws.user_bytes} B user)", 13, weight="bold")]
    top += 24
    parts = [("system", 0, ws.system_bytes, "#cccccc")]
    parts += [(r.name, ws.system_bytes + r.offset, r.nbytes, core_colour(i + 3)) for i, r in enumerate(ws.regions)]
    parts = [p for p in parts if p[2]]
    width = WIDTH - 2 * _MARGIN
    if not parts:
        out.append(_text(_MARGIN, top + 14, "none: the plan launches no kernel", 11))
        return out, top + 30
    # each part at least 140 px wide, the rest shared by bytes
    spare = width - 140 * len(parts)
    total = sum(p[2] for p in parts)
    x = _MARGIN
    for name, offset, nbytes, colour in parts:
        w = 140 + max(spare, 0) * nbytes / total
        out.append(f'<rect class="region" data-name="{_escape(name)}" data-offset="{offset}" data-bytes="{nbytes}" '
                   f'x="{x:.1f}" y="{top}" width="{w:.1f}" height="34" fill="{colour}" stroke="#555"/>')
        out.append(_text(x + 4, top + 14, name, 11))
        out.append(_text(x + 4, top + 28, f"@{offset} {_bytes(nbytes)}", 10))
        x += w
    return out, top + 46


def _legend(plan) -> list[str]:
    key = "-" if plan.tiling_key is None else str(plan.tiling_key)
    facts = [f"{plan.op} [{plan.strategy.value}] on {plan.soc.name} ({plan.soc.product})",
             f"source {plan.source}   tiling key {key}   block_dim {plan.block_dim} of {plan.soc.vector_cores} "
             f"cores   UB {plan.summary_ub() or '-'} of {_bytes(plan.soc.ub_bytes)}",
             f"split {plan.core_split.kind.value} {plan.core_split.describe()}   tree {plan.tree.describe()}   "
             f"{'deterministic' if plan.deterministic else 'NON-DETERMINISTIC (atomic adds)'}"]
    return [_text(_MARGIN, 24 + 18 * i, fact, 14 if i == 0 else 12, weight="bold" if i == 0 else "normal")
            for i, fact in enumerate(facts)]


def plan_svg(plan, arrival=None) -> str:
    """The SVG document of ``plan`` (``Plan.to_svg``); ``arrival`` an example arrival order of an
    atomic level's partials, shown in its box."""
    body = _legend(plan)
    top = 24 + 18 * 3
    for panel in (lambda t: _space(plan, t), lambda t: _tree(plan, t, arrival), lambda t: _workspace(plan, t)):
        drawn, top = panel(top + 8)
        body += drawn
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{top + _MARGIN:.0f}" '
            f'viewBox="0 0 {WIDTH} {top + _MARGIN:.0f}">'
            '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
            '<path d="M0,0 L8,4 L0,8 z" fill="#444"/></marker></defs>'
            f'<rect width="{WIDTH}" height="{top + _MARGIN:.0f}" fill="white"/>')
    return "\n".join([head, *body, "</svg>", ""])
