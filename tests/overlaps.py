"""What overlaps in a drawn matplotlib figure, measured in the renderer's own pixels.

`overlaps(fig)` draws the figure (`fig.canvas.draw()`) and returns one line per fault it finds:

- text on text: two labels whose boxes (the text's extent, or the box drawn around it) overlap. Titles, axis labels
  and tick labels count as labels; two tick labels of one axis are left to matplotlib's locators;
- a label on a line: a label's box that a drawn line crosses or reaches into: a curve (its segments as drawn,
  steps included, clipped to its axes), an arrow (its path as drawn, curved arrows flattened), a reference line
  (`axhline`, `axvline`), the outline of a patch whose edge is drawn (a rectangle's border, a circle), or a
  marker. An annotation's own arrow, which starts at its text, is not held against it;
- a legend on data: a legend whose box covers a point of a curve or of its segments, a marker, or a patch that
  is data (a bar, a drawn shape; a shaded band across a whole axis, axvspan's, is background and left out);
- big markers on each other: two markers of at least BIG points, from different series, that overlap without
  being at one place (centres less than a quarter of a marker apart read as one point shown twice: two
  programs' equal results, drawn one over the other on purpose).

A box is taken TOLERANCE points inside its edges, so that touching is not overlapping.

Not measured: pixels (an image, imshow's colours, a label's contrast on a filled area: a label inside a filled
cell or bar is how many pictures name it); faces of filled patches under labels; filled collections (fill_between,
broken_barh); whether a line is hidden under an opaque box drawn above it (a line that runs under a box still
reads as running into it, so it counts); anything outside matplotlib (the Graphviz pictures of plot_dot_graph are
laid out by `dot`, whose placements are not visible here).
"""
import itertools

import numpy as np
from matplotlib.cbook import STEP_LOOKUP_MAP
from matplotlib.collections import LineCollection, PathCollection
from matplotlib.legend import Legend
from matplotlib.patches import FancyArrowPatch
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox

TOLERANCE = 1.0  # points
BIG = 10.0  # points: the size of a marker that stands out (a star, a highlighted point)


def overlaps(fig):
    """One line per overlap found in `fig` (see the module's docstring); [] when none."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    tol = TOLERANCE * fig.dpi / 72
    labels = list(_labels(fig, renderer))
    drawn = [item for ax in _axes(fig) for item in _drawn(ax, fig.dpi)]
    faults = []
    for (name_a, box_a, group_a, _), (name_b, box_b, group_b, _) in itertools.combinations(labels, 2):
        if group_a is not None and group_a == group_b:
            continue
        if _overlap(box_a, box_b) > tol:
            faults.append(f"text on text: {name_a!r} at {_at(box_a)} and {name_b!r} at {_at(box_b)}")
    for name, box, _, owner in labels:
        if isinstance(owner, Legend):
            continue  # measured below, against data
        inner = _shrink(box, tol)
        for what, kind, geometry, source in drawn:
            if kind == "area" or owner is not None and source is owner:
                continue
            if kind == "segments" and _crosses(inner, geometry) or kind == "box" and _overlap(inner, geometry) > 0:
                faults.append(f"label on a line: {name!r} at {_at(box)} on {what}")
                break
    for legend in _legends(fig):
        inner = _shrink(legend.get_window_extent(renderer), tol)
        for what, kind, geometry, _ in drawn:
            if kind == "segments" and _crosses(inner, geometry) or kind in ("box", "area") and \
                    _overlap(inner, geometry) > 0:
                faults.append(f"legend on data: the legend ({_legend_text(legend)!r}) at {_at(inner)} covers {what}")
                break
    big = [(what, geometry, source) for what, kind, geometry, source in drawn
           if kind == "box" and geometry.width >= BIG * fig.dpi / 72 - 1e-9]
    for (what_a, a, source_a), (what_b, b, source_b) in itertools.combinations(big, 2):
        same_place = np.hypot(a.x0 + a.x1 - b.x0 - b.x1, a.y0 + a.y1 - b.y0 - b.y1) / 2 <= \
            min(a.width, b.width) / 4
        if source_a is not source_b and not same_place and _overlap(a, b) > tol:
            faults.append(f"markers on each other: {what_a} and {what_b} at {_at(a)} and {_at(b)}")
    return faults


def _labels(fig, renderer):
    """(name, box, group, owner) of every label drawn: group is set for tick labels of one axis (not compared with
    one another), owner is the artist whose own lines the label may touch (an annotation's arrow)."""
    texts = [(t, None) for t in fig.texts]
    for name in ("_suptitle", "_supxlabel", "_supylabel"):
        texts.append((getattr(fig, name, None), None))
    for ax in _axes(fig):
        if not ax.get_visible():
            continue
        texts += [(t, None) for t in ax.texts]
        texts += [(t, None) for t in (ax.title, ax._left_title, ax._right_title)]
        for axis in (ax.xaxis, ax.yaxis):
            if not axis.get_visible() or not ax.axison:
                continue
            texts.append((axis.label, None))
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if low - 1e-12 * max(1, abs(low)) <= tick.get_loc() <= high + 1e-12 * max(1, abs(high)):
                    texts += [(tick.label1, axis), (tick.label2, axis)]
    seen = set()
    for text, group in texts:
        if text is None or id(text) in seen or not text.get_visible() or not text.get_text().strip():
            continue
        seen.add(id(text))  # the suptitle is one of fig.texts too
        box = Text.get_window_extent(text, renderer)  # an annotation's own extent takes in its arrow
        patch = text.get_bbox_patch()
        if patch is not None and patch.get_visible():
            box = Bbox.union([box, patch.get_window_extent(renderer)])
        if box.width > 0 and box.height > 0:
            yield text.get_text(), box, group, text if isinstance(text, Annotation) else None
    for legend in _legends(fig):
        yield f"legend {_legend_text(legend)!r}", legend.get_window_extent(renderer), None, legend


def _axes(fig):
    """The figure's axes and their children (secondary axes, insets)."""
    axes = list(fig.axes)
    for ax in axes:
        axes += [child for child in ax.child_axes if child not in axes]
    return axes


def _legends(fig):
    legends = list(fig.legends) + [ax.get_legend() for ax in _axes(fig)]
    return [legend for legend in legends if isinstance(legend, Legend) and legend.get_visible()]


def _legend_text(legend):
    return ", ".join(t.get_text() for t in legend.get_texts())[:60]


def _drawn(ax, dpi):
    """(what, kind, geometry, source) of what ax draws: kind "segments" (an (n, 2, 2) array of display-coordinate
    segments), "box" (a marker's Bbox) or "area" (a data patch's Bbox, for legends only)."""
    if not ax.get_visible():
        return
    clip = ax.bbox
    for line in ax.lines:
        if not line.get_visible():
            continue
        name = f"line {line.get_label()!r}"
        xy = np.column_stack([line.get_xdata(orig=False), line.get_ydata(orig=False)]).astype(float)
        xy = xy[np.isfinite(xy).all(axis=1)]
        if line.get_linestyle() not in ("None", "", " ") and line.get_linewidth() > 0 and len(xy) > 1:
            if line.get_drawstyle() in STEP_LOOKUP_MAP and line.get_drawstyle() != "default":
                xy = np.column_stack(STEP_LOOKUP_MAP[line.get_drawstyle()](*xy.T))
            points = line.get_transform().transform(xy)
            segments = np.stack([points[:-1], points[1:]], axis=1)
            yield name, "segments", _clipped(segments, clip if line.get_clip_on() else None), line
        if line.get_marker() not in ("None", "", " ", None) and len(xy):
            side = line.get_markersize() * dpi / 72
            for x, y in line.get_transform().transform(xy):
                if not line.get_clip_on() or clip.contains(x, y):
                    yield f"{name}'s marker", "box", Bbox.from_bounds(x - side / 2, y - side / 2, side, side), line
    for collection in ax.collections:
        if not collection.get_visible():
            continue
        name = f"{type(collection).__name__} {collection.get_label()!r}"
        if isinstance(collection, PathCollection):
            offsets = collection.get_offset_transform().transform(collection.get_offsets())
            sizes = collection.get_sizes()
            for k, (x, y) in enumerate(offsets):
                side = np.sqrt(sizes[k % len(sizes)] if len(sizes) else 36.0) * dpi / 72
                if np.isfinite([x, y]).all():
                    yield f"{name}'s marker", "box", Bbox.from_bounds(x - side / 2, y - side / 2, side, side), \
                        collection
        elif isinstance(collection, LineCollection):
            transform = collection.get_transform()
            parts = [transform.transform(np.asarray(s, float)) for s in collection.get_segments() if len(s) > 1]
            segments = [np.stack([p[:-1], p[1:]], axis=1) for p in parts]
            if segments:
                yield name, "segments", _clipped(np.concatenate(segments), clip), collection
    for patch in ax.patches:
        if not patch.get_visible():
            continue
        box = patch.get_window_extent()
        if not isinstance(patch, FancyArrowPatch) and \
                (box.width >= ax.bbox.width - 1 or box.height >= ax.bbox.height - 1):
            continue  # a band across the axes (axvspan, axhspan): background
        if not isinstance(patch, FancyArrowPatch) and patch.get_facecolor()[3] > 0:
            yield f"{type(patch).__name__} at x {box.x0:.0f}, y {box.y0:.0f} px", "area", box, patch
        if isinstance(patch, FancyArrowPatch) or patch.get_edgecolor()[3] > 0 and patch.get_linewidth() > 0:
            yield f"{type(patch).__name__}'s outline", "segments", \
                _clipped(_path_segments(patch), clip if patch.get_clip_on() else None), patch
    for text in ax.texts:
        if isinstance(text, Annotation) and text.arrow_patch is not None and text.arrow_patch.get_visible():
            what = f"the arrow of {text.get_text()!r}" if text.get_text() else "an arrow"
            yield what, "segments", _path_segments(text.arrow_patch), text


def _path_segments(patch):
    """A patch's outline in display coordinates, curves flattened, as (n, 2, 2) segments."""
    path = patch.get_transform().transform_path(patch.get_path())
    polygons = path.to_polygons(closed_only=False)
    segments = [np.stack([p[:-1], p[1:]], axis=1) for p in polygons if len(p) > 1]
    return np.concatenate(segments) if segments else np.empty((0, 2, 2))


def _clipped(segments, box):
    """The segments' parts inside `box` (None: all), by Liang-Barsky; empty ones dropped."""
    if box is None or not len(segments):
        return segments
    kept = [_clip(s, box) for s in segments]
    kept = [s for s in kept if s is not None]
    return np.array(kept) if kept else np.empty((0, 2, 2))


def _clip(segment, box):
    (x0, y0), (x1, y1) = segment
    dx, dy = x1 - x0, y1 - y0
    low, high = 0.0, 1.0
    for p, q in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if p == 0:
            if q < 0:
                return None
            continue
        t = q / p
        if p < 0:
            low = max(low, t)
        else:
            high = min(high, t)
        if low > high:
            return None
    return np.array([[x0 + low * dx, y0 + low * dy], [x0 + high * dx, y0 + high * dy]])


def _crosses(box, segments):
    """Whether any segment has a part inside `box`."""
    if box.width <= 0 or box.height <= 0:
        return False
    return any(_clip(s, box) is not None for s in segments)


def _at(box):
    """A box as the pixels it spans, for messages: x0-x1, y0-y1 from the figure's lower left corner."""
    return f"x {box.x0:.0f}-{box.x1:.0f}, y {box.y0:.0f}-{box.y1:.0f} px"


def _shrink(box, by):
    return Bbox.from_extents(box.x0 + by, box.y0 + by, box.x1 - by, box.y1 - by)


def _overlap(a, b):
    """The smaller side of the intersection of two boxes (0 when they do not meet)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, min(width, height))
