"""Watching a backward pass of the snapshots of steps 13-16: which functions ran, in what order.

Duck-typed on the snapshots' classes (a function's `inputs`, a variable's `creator`), so a page of stage 2
can number its own graph's functions by their turn in backward without the package's engine.
"""


def ordinal(n):
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def backward_order(y):
    """y.backward(), noting the functions in the order their backward ran: [function]."""
    ran, todo, wrapped = [], [y.creator], []
    while todo:
        f = todo.pop()
        if f is None or any(f is g for g in wrapped):
            continue
        wrapped.append(f)
        f.backward = lambda *gys, f=f, original=f.backward: ran.append(f) or original(*gys)
        todo.extend(x.creator for x in f.inputs)
    y.backward()
    for f in wrapped:
        del f.backward  # the instance's wrapper goes; the class's backward is back
    return ran


class Traced:
    """Mix-in for a Function subclass: print each backward call as the loop makes it
    (`class TracedSquare(Traced, Square): pass`, then `TracedSquare("B: a**2")(a)`)."""

    def __init__(self, label):
        self.label = label

    def backward(self, *gys):
        gxs = super().backward(*gys)
        shown = ", ".join(f"{float(g):.0f}" for g in (gxs if isinstance(gxs, tuple) else (gxs,)))
        print(f"{self.label:<12} gy = {float(gys[0]):>4.0f}   sends back {shown}")
        return gxs
