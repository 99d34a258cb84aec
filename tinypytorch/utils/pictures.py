"""Pictures of a computational graph in matplotlib, for the pages of stages 1-3 (no Graphviz needed).

`draw_dag` draws any small graph given as nodes and edges: a variable is a rounded box, a function a
square grey one, and every arrow points the way data flows in forward. `draw_graph(y)` finds the graph
behind the variables of steps 07-22 itself, following `creator` and each function's `inputs` (or the
single `input` of steps 07-10), so a page can draw the very objects it built. Arrows start and end at the
boxes' edges, and one that would run through another box or a note bends around it
(tests/test_picture_overlaps.py measures that no label sits on an arrow).
"""
import weakref

STYLE = {  # kind: (box style, face colour); the colours of the Graphviz drawings of step 25
    "variable": ("round,pad=0.35", "white"),
    "leaf": ("round,pad=0.35", "lightblue"),
    "output": ("round,pad=0.35", "#caff70"),
    "function": ("square,pad=0.45", "lightgrey"),
    "highlight": ("square,pad=0.45", "#ffcc80"),
}


def _layers(nodes, edges):
    """{node: column}: a node one column right of the furthest node that feeds it (longest path)."""
    column = {node: 0 for node in nodes}
    for _ in nodes:  # a DAG settles within len(nodes) sweeps
        for a, b in edges:
            column[b] = max(column[b], column[a] + 1)
    return column


def _positions(nodes, edges):
    """{node: (x, y)}: columns left to right, each column's nodes spread top to bottom in the order given."""
    column = _layers(nodes, edges)
    rows = {}
    for node in nodes:
        rows.setdefault(column[node], []).append(node)
    return {node: (column[node], (len(members) - 1) / 2 - members.index(node))
            for members in rows.values() for node in members}


def draw_dag(nodes, edges, ax=None, title=None, positions=None, notes=None, edge_labels=None, edge_styles=None):
    """Draw a small graph. `nodes`: {id: (kind, label)} with kind a key of STYLE; `edges`: [(from, to)].

    `positions`: {id: (x, y)} to place nodes by hand (default: columns by longest path); `notes`: {id: text}
    written just below a node (an order, a generation); `edge_labels`: {(from, to): text} at an arrow's middle;
    `edge_styles`: {(from, to): arrowprops} that change an arrow's look (a colour, a dotted line). An arrow whose
    straight line would cross another box or a note bends around it (see _bend). Returns the axes.
    """
    import matplotlib.pyplot as plt
    if ax is None:
        columns = max(_layers(list(nodes), edges).values(), default=0) + 1
        _, ax = plt.subplots(figsize=(min(2.0 + 1.6 * columns, 11), 2.6))
    where = positions or _positions(list(nodes), edges)
    boxes, texts = {}, []
    for node, (kind, label) in nodes.items():
        boxstyle, colour = STYLE[kind]
        boxes[node] = ax.text(*where[node], label, ha="center", va="center", fontsize=10, zorder=3,
                              bbox=dict(boxstyle=boxstyle, facecolor=colour, edgecolor="0.3"))
        if notes and node in notes:
            texts.append(ax.text(where[node][0], where[node][1] - 0.36, notes[node], ha="center", va="top",
                                 fontsize=9, color="#b22222"))
    xs, ys = [x for x, _ in where.values()], [y for _, y in where.values()]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    labels = {}  # placed before the arrows, so that none runs through them
    for (a, b), text in (edge_labels or {}).items():
        (xa, ya), (xb, yb) = where[a], where[b]
        labels[a, b] = ax.text((xa + xb) / 2, (ya + yb) / 2 + 0.12, text, ha="center", fontsize=9, color="0.25")
    for a, b in edges:  # each arrow clipped at the two boxes' edges, however wide their labels
        others = [box for node, box in boxes.items() if node not in (a, b)] + texts
        rad = _bend(ax, where[a], where[b], others + [label for edge, label in labels.items() if edge != (a, b)])
        style = dict(arrowstyle="-|>", color="0.35", lw=1.2, shrinkA=3, shrinkB=3, connectionstyle=f"arc3,rad={rad}",
                     patchA=boxes[a].get_bbox_patch(), patchB=boxes[b].get_bbox_patch())
        ax.annotate("", xy=where[b], xytext=where[a], arrowprops=style | (edge_styles or {}).get((a, b), {}))
        if rad and (a, b) in labels:  # over the middle of the curve, which lies half way to arc3's control point
            (x1, y1), (x2, y2) = ax.transData.transform([where[a], where[b]])
            x, y = ax.transData.inverted().transform(((x1 + x2) / 2 + rad * (y2 - y1) / 2,
                                                      (y1 + y2) / 2 - rad * (x2 - x1) / 2))
            labels[a, b].set_position((x, y + 0.12))
    return ax


BENDS = (-0.15, 0.15, -0.3, 0.3, -0.45, 0.45)  # arc3's rad: a negative one bends a left-to-right arrow upwards


def _bend(ax, start, end, obstacles):
    """0 (a straight arrow) when the line from start to end (centres, data coordinates) crosses no obstacle (texts:
    the boxes of other nodes, the notes) by more than a point; else the first of BENDS whose arc clears every
    obstacle by 4 points (or, failing that, merely misses them); 0 if none does.

    Measured in the figure's pixels along the curve matplotlib draws for arc3: the quadratic Bezier curve through
    the control point mid + rad * (dy, -dx).
    """
    renderer = ax.figure.canvas.get_renderer()
    boxes = []
    for text in obstacles:
        if text.get_bbox_patch() is not None:
            text.update_bbox_position_size(renderer)
            boxes.append(text.get_bbox_patch().get_window_extent(renderer))
        else:
            boxes.append(text.get_window_extent(renderer))
    (x1, y1), (x2, y2) = ax.transData.transform([start, end])
    pieces = max(16, int(abs(x2 - x1) + abs(y2 - y1)) // 4)  # the curve as straight pieces of a few pixels

    def clear(rad, margin):
        cx, cy = (x1 + x2) / 2 + rad * (y2 - y1), (y1 + y2) / 2 - rad * (x2 - x1)
        ts = [k / pieces for k in range(pieces + 1)] if rad else [0.0, 1.0]
        curve = [((1 - t) ** 2 * x1 + 2 * t * (1 - t) * cx + t * t * x2,
                  (1 - t) ** 2 * y1 + 2 * t * (1 - t) * cy + t * t * y2) for t in ts]
        return not any(_meets(p, q, (b.x0 - margin, b.y0 - margin, b.x1 + margin, b.y1 + margin))
                       for p, q in zip(curve, curve[1:]) for b in boxes)

    points = ax.figure.dpi / 72
    if clear(0.0, -points):  # grazing a box's corner by under a point is not crossing it
        return 0.0
    return next((rad for margin in (4 * points, 0.0) for rad in BENDS if clear(rad, margin)), 0.0)


def _meets(p, q, box):
    """Whether the segment p-q has a point inside box = (x0, y0, x1, y1): Liang-Barsky's clipping."""
    (px, py), (qx, qy), (x0, y0, x1, y1) = p, q, box
    low, high = 0.0, 1.0
    for towards, room in ((px - qx, px - x0), (qx - px, x1 - px), (py - qy, py - y0), (qy - py, y1 - py)):
        if towards == 0:
            if room < 0:
                return False  # parallel to this edge, and outside it
        elif towards < 0:
            low = max(low, room / towards)
        else:
            high = min(high, room / towards)
    return low <= high


def _deref(v):
    return v() if isinstance(v, weakref.ref) else v


def _inputs_of(f):
    return list(f.inputs) if hasattr(f, "inputs") else [f.input]


def _outputs_of(f):
    outputs = f.outputs if hasattr(f, "outputs") else [f.output]
    return [o for o in map(_deref, outputs) if o is not None]


def _variable_label(v, names):
    label = next((text for obj, text in names if obj is v), None)  # by identity: a Variable may define ==
    if label is not None:
        return label
    if getattr(v, "name", None) is not None:
        return v.name
    data = getattr(v, "data", None)
    return f"{data.item():g}" if getattr(data, "ndim", None) == 0 else "variable"


def graph_of(*outputs, names=None):
    """(nodes, edges) of the graph behind `outputs`, for draw_dag: variables as found in the objects themselves.

    Functions are met first in, first out from the outputs' creators; each variable is drawn once.
    `names`: {variable: label} (or [(variable, label)]) where a variable has no `name` (before step 19).
    """
    nodes, edges, _ = _walk(outputs, _pairs(names))
    return nodes, edges


def _pairs(mapping):
    """[(object, text)] from a dict or from pairs (a list of pairs suits objects that cannot be dict keys)."""
    return [] if mapping is None else list(mapping.items() if isinstance(mapping, dict) else mapping)


def _walk(outputs, names):
    """graph_of's nodes and edges, and {id(object): node id} so that notes keyed by objects find their boxes."""
    ids, nodes, edges = {}, {}, []

    def node(obj, kind, label):
        if id(obj) not in ids:
            ids[id(obj)] = len(ids)
            nodes[ids[id(obj)]] = (kind, label)
        return ids[id(obj)]

    def variable(v):
        kind = "output" if any(v is o for o in outputs) else "leaf" if v.creator is None else "variable"
        return node(v, kind, _variable_label(v, names))

    queue, seen = [v.creator for v in outputs if v.creator is not None], set()
    while queue:
        f = queue.pop(0)
        if id(f) in seen:
            continue
        seen.add(id(f))
        f_id = node(f, "function", type(f).__name__)
        for x in _inputs_of(f):
            edges.append((variable(x), f_id))
            if x.creator is not None:
                queue.append(x.creator)
        edges.extend((f_id, variable(y)) for y in _outputs_of(f))
    for v in outputs:
        variable(v)
    return nodes, list(dict.fromkeys(edges)), ids


def draw_graph(*outputs, names=None, ax=None, title=None, notes=None):
    """Draw the graph behind `outputs` (see graph_of). `notes`: {function or variable: text} under its box
    (or [(object, text)]). Returns the axes."""
    nodes, edges, ids = _walk(outputs, _pairs(names))
    by_id = {ids[id(obj)]: text for obj, text in _pairs(notes) if id(obj) in ids}
    return draw_dag(nodes, edges, ax=ax, title=title, notes=by_id)
