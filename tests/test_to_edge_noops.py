"""The slices `to_edge` removes before any partitioner sees them.

qflow treats a slice that keeps its input's whole shape as absent
(`removed_by_to_edge`): a requant after it is realised, not dropped by a code
copy. This measures the premise on ExecuTorch itself — every slice qflow
calls removed is gone after `to_edge`, every other one is still there — and
the consequence is measured on the TOSA reference model by the pinned
campaign cases 00105 and 00945 (tests/test_soundness_campaign.py).
"""

from __future__ import annotations

import torch

from qflow.ir.fx_nodes import removed_by_to_edge


class _Slices(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        aten = torch.ops.aten
        return (
            aten.slice.Tensor(x, 2, 0, 8) + 1,  # whole dim, view spelling
            aten.slice_copy.Tensor(x, 3, 0, 2**63 - 1) + 2,  # whole dim, open end
            aten.slice_copy.Tensor(x, 1, 0, 2) + 3,  # part of a dim
            aten.slice.Tensor(x, 2, 1, 8) + 4,  # part of a dim, from 1
            aten.slice_copy.Tensor(x, 3, 0, 8, 2) + 5,  # whole dim, step 2
        )


def test_removed_by_to_edge_is_what_to_edge_removes() -> None:
    from executorch.exir import to_edge

    ep = torch.export.export(_Slices().eval(), (torch.randn(1, 3, 8, 8),))
    slices = [n for n in ep.graph.nodes if "slice" in str(n.target)]
    assert len(slices) == 5
    removed = {n.name for n in slices if removed_by_to_edge(n)}
    assert len(removed) == 2
    edge = to_edge(ep).exported_program().graph
    kept = [_key(n) for n in edge.nodes if "slice" in str(n.target)]
    assert sorted(kept) == sorted(_key(n) for n in slices if n.name not in removed)


def _key(n: torch.fx.Node) -> tuple[int, ...]:
    """(dim, start, end, step) with the end cut to the dimension, as to_edge spells it."""
    dim, start, end, step = (list(n.args[1:]) + [1])[:4]
    return dim, start, min(end, n.args[0].meta["val"].shape[dim]), step
