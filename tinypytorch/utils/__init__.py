"""Tools around the graph, one module per concept; this face keeps every `tinypytorch.utils.X` working.

    numerical   numerical_diff, gradient_check: central differences and a check of backward (step 10)
    walking     functions_in_graph, saved_tensors: what the graph behind a Variable holds (steps 24, 35)
    drawing     get_dot_graph, plot_dot_graph, DotGraph: the graph as DOT text and pictures (step 25)
    checkpoint  checkpoint, checkpoint_sequential (steps 42-44), as torch.utils.checkpoint; selective (step 63)
    data        Dataset, DataLoader (step 51), as torch.utils.data
    pytree      tree_flatten, tree_unflatten, tree_map: nested tuples, lists and dicts of Variables (step 65)
    memory      peak_memory (step 66); memory_timeline: memory held over a training step, drawn (step 67)
    listing     show_code, show_change: the book's listings of package code and of the snapshots' changes
    pictures    draw_dag, draw_graph: small graphs drawn in matplotlib for the pages of stages 1-3
    tracing     backward_order, Traced: which functions a snapshot's backward ran, in what order (steps 13-16)
"""
from tinypytorch.utils.drawing import GRAPH_STYLE, DotGraph, get_dot_graph, missing_drawing_tools, plot_dot_graph
from tinypytorch.utils.numerical import gradient_check, numerical_diff
from tinypytorch.utils.walking import functions_in_graph, saved_tensors

__all__ = [
    "numerical_diff", "gradient_check", "functions_in_graph", "saved_tensors",
    "GRAPH_STYLE", "DotGraph", "get_dot_graph", "plot_dot_graph", "missing_drawing_tools",
]
