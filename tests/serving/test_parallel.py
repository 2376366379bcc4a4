"""Tensor parallel's pieces put together (pure: runs in the test venv too, no vLLM needed): each rank's shard cut
by hand as vLLM's Linear layers cut their weights, then joined back."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.serving.parallel import REPLICATED_TOLERANCE, Ranks, disagreement, joined, layout, merged


class QKVParallelLinear(nn.Module):
    """vLLM's attributes of a fused QKV projection at 2 ranks: 2 query heads and 1 KV head per rank of 3 columns."""

    def __init__(self, kv_heads: int, shared: int) -> None:
        super().__init__()
        self.head_size = self.v_head_size = 3
        self.num_heads, self.num_kv_heads, self.num_kv_head_replicas = 2, kv_heads, shared


class MergedColumnParallelLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.output_sizes, self.gather_output = [4, 4], False


class RowParallelLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.input_size_per_partition, self.input_is_parallel, self.reduce_results = 5, True, True


def test_qkv_is_joined_as_all_queries_then_keys_then_values() -> None:
    q, k, v = torch.randn(7, 12), torch.randn(7, 6), torch.randn(7, 6)  # 4 query heads, 2 KV heads
    shards = [
        torch.cat([q[:, 6 * r : 6 * r + 6], k[:, 3 * r : 3 * r + 3], v[:, 3 * r : 3 * r + 3]], -1) for r in (0, 1)
    ]
    pieces = layout(QKVParallelLinear(kv_heads=1, shared=1), "output", 2)
    assert pieces == [(6, 1), (3, 1), (3, 1)]
    torch.testing.assert_close(joined(shards, pieces), torch.cat([q, k, v], -1), atol=0, rtol=0)


def test_a_kv_head_shared_by_two_ranks_is_taken_once() -> None:
    q, k, v = torch.randn(7, 12), torch.randn(7, 3), torch.randn(7, 3)  # 4 query heads, 1 KV head on both ranks
    shards = [torch.cat([q[:, 6 * r : 6 * r + 6], k, v], -1) for r in (0, 1)]
    pieces = layout(QKVParallelLinear(kv_heads=1, shared=2), "output", 2)
    assert pieces == [(6, 1), (3, 2), (3, 2)]
    torch.testing.assert_close(joined(shards, pieces), torch.cat([q, k, v], -1), atol=0, rtol=0)


def test_gate_up_is_joined_gate_then_up_and_a_row_parallel_input_side_by_side() -> None:
    gate, up = torch.randn(2, 4), torch.randn(2, 4)
    shards = [torch.cat([gate[:, 2 * r : 2 * r + 2], up[:, 2 * r : 2 * r + 2]], -1) for r in (0, 1)]
    pieces = layout(MergedColumnParallelLinear(), "output", 2)
    torch.testing.assert_close(joined(shards, pieces or []), torch.cat([gate, up], -1), atol=0, rtol=0)
    row = RowParallelLinear()
    assert layout(row, "input", 2) == [(5, 1)]
    assert layout(row, "output", 2) is None  # all-reduced: every rank holds it whole
    assert layout(MergedColumnParallelLinear(), "input", 2) is None
    assert layout(MergedColumnParallelLinear(), "output", 1) is None  # one rank: nothing split
    assert layout(nn.Linear(2, 2), "output", 2) is None


class Handed(Ranks):
    """Ranks whose ``gathered`` hands back the copies given (what every rank would have sent)."""

    def __init__(self, copies: list[Tensor]) -> None:
        super().__init__(2, 0, None)
        self.copies, self.gathers = copies, 0

    def gathered(self, tensor: Tensor) -> list[Tensor]:
        self.gathers += 1
        return self.copies


def test_replicated_copies_are_checked_once_and_a_disagreement_names_the_site() -> None:
    value = torch.tensor([[1.0, -2.0]])
    close = Handed([value, value + 2.0**-20])  # float32-exact: a difference of 2^-20 against a largest 2
    assert disagreement(close.copies) == 2.0**-21
    for _ in range(3):
        assert close.whole("model.layers.0", nn.Identity(), "output", [("residual", value)])[0][1] is value
    assert close.gathers == 1  # the first call only
    apart = Handed([value, value * (1 + 10 * REPLICATED_TOLERANCE)])
    refused = pytest.raises(hookscope.ServingError, match=r"'model.layers.0.mlp.act_fn' output out differs between")
    with refused:
        apart.whole("model.layers.0.mlp.act_fn", nn.Identity(), "output", [("out", value)])


def test_rank_0s_records_are_kept_and_a_request_failed_on_any_rank_fails() -> None:
    zero = {"records": {"0": "whole"}, "errors": {"1": "rank 0's"}, "fired": {"model.layers.0": 3}}
    one = {"records": {}, "errors": {"1": "rank 1's", "2": "rank 1's"}, "fired": {"model.layers.0": 3}}
    found = merged([zero, one])
    assert found["records"] == {"0": "whole"} and found["errors"] == {"1": "rank 0's", "2": "rank 1's"}
