"""Costs of If / Loop / Scan: the cost of their bodies, times how often they run.

If: the branch taken for the workload's inputs when its condition is known (a constant, or a value seen in
the shape-resolving execution), else the dearer branch, flagged as an upper bound. Loop: body x the trip
count when known (constant, or the executed count), else unknown (never guessed). Scan: body x the scanned
length. A body op of unknown cost makes the whole node unknown.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from lib.onnx.reader import attr as _attr

Cost = tuple[float, float]          # (flops, macs)


def _scaled(c, k):
    return None if c is None or k is None else (c[0] * float(k), c[1] * float(k))


def control_flow_cost(node, g, bodies: dict[str, Cost | None]) -> Cost | None:
    """The registry's cost of If / Loop / Scan: `bodies` holds each body's cost (attribute name -> total, None
    when unknown), walked by lib/onnx/costs.py; this only decides which of them runs and how often."""
    if node.op_type == "If":
        taken = if_branch(node, g)
        if taken is not None:
            return bodies.get(taken)
        costs = list(bodies.values())
        if not costs or any(c is None for c in costs):
            return None
        return max(costs, key=lambda c: c[0])
    if node.op_type == "Loop":
        return _scaled(bodies["body"], loop_trips(node, g))
    # Scan: the scan inputs' leading (or scan_input_axes) dimension
    n_state = len(node.input) - int(_attr(node, "num_scan_inputs", 0))
    x = g.tensors.get(node.input[n_state]) if len(node.input) > n_state else None
    axes = _attr(node, "scan_input_axes", [0]) or [0]
    if x is None or x.shape is None:
        return None
    return _scaled(bodies["body"], x.shape[axes[0]])


def if_branch(node, g) -> str | None:
    """then_branch / else_branch when the condition's value is known, else None."""
    cond = g.value_of(node.input[0]) if node.input else None
    return None if cond is None else ("then_branch" if bool(cond) else "else_branch")


def cost_note(node, g) -> str:
    """What a control-flow node's figure means: exact for the workload's inputs, or an upper bound."""
    if node.op_type == "If":
        taken = if_branch(node, g)
        return f"{taken} taken" if taken else "upper bound: condition unknown, the dearer branch"
    if node.op_type == "Loop":
        trips = loop_trips(node, g)
        return f"{trips} iterations" if trips is not None else ""
    return ""


def loop_trips(node, g) -> int | None:
    """The trip count: M (its value known from a constant or the workload's inputs; a negative M runs no
    iteration) when the body passes its condition through unchanged, 0 when the initial condition is false,
    else unknown."""
    m = g.value_of(node.input[0]) if node.input and node.input[0] else None
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and g.value_of(cond) is not None and not bool(g.value_of(cond)):
        return 0
    body = next(a.g for a in node.attribute if a.name == "body")
    passes = not cond or (body.output and _cond_stays_true(body, g))
    return max(0, int(m)) if m is not None and passes else None


MAX_PROFILED_TRIPS = 10**7      # a Loop with more iterations per inference would not finish profiling


def runaway_loops(g) -> list[tuple[str, int]]:
    """(node, trip count) of the Loops whose known trip count is beyond what a profiling run can finish."""
    out = []
    for name, n in zip(g.names, g.nodes):
        if n.op_type == "Loop":
            trips = loop_trips(n, g)
            if trips is not None and trips > MAX_PROFILED_TRIPS:
                out.append((name, trips))
    return out


def _cond_stays_true(body, g) -> bool:
    """The body's condition output is its condition input (directly or through an Identity), or a constant
    true: a Constant of the body, or a value the enclosing graph knows (torch.jit.script's for loop, exported by
    the TorchScript exporter: Identity of an outer Constant true; its Loop was left uncosted)."""
    out = body.output[0].name
    src = next((n.input[0] for n in body.node if n.op_type == "Identity" and n.output[0] == out), out)
    if src == body.input[1].name:
        return True
    const = next((n for n in body.node if n.op_type == "Constant" and n.output[0] == src), None)
    value = g.value_of(src) if const is None else next(
        (numpy_helper.to_array(a.t) for a in const.attribute if a.name == "value"), None)
    return value is not None and np.size(value) == 1 and bool(np.all(value))
