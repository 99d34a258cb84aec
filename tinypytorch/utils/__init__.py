"""Tools around the graph, one module per concept; this face keeps every `tinypytorch.utils.X` working.

    numerical   numerical_diff, gradient_check: central differences and a check of backward (step 10)
    walking     functions_in_graph, saved_tensors: what the graph behind a Variable holds (steps 24, 35)
    drawing     get_dot_graph, plot_dot_graph, DotGraph: the graph as DOT text and pictures (step 25)
    checkpoint  checkpoint, checkpoint_sequential (steps 41-45), as torch.utils.checkpoint
    data        Dataset, DataLoader (step 51), as torch.utils.data
    listing     show_code: the book's listings of package code (stage 4 on)
"""
from tinypytorch.utils.drawing import GRAPH_STYLE, DotGraph, get_dot_graph, missing_drawing_tools, plot_dot_graph
from tinypytorch.utils.numerical import gradient_check, numerical_diff
from tinypytorch.utils.walking import functions_in_graph, saved_tensors

__all__ = [
    "numerical_diff", "gradient_check", "functions_in_graph", "saved_tensors",
    "GRAPH_STYLE", "DotGraph", "get_dot_graph", "plot_dot_graph", "missing_drawing_tools",
]
