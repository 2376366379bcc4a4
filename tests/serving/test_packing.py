"""A packed step read as requests (pure: runs in the test venv too, no vLLM needed)."""

from __future__ import annotations

import torch

from hookscope.serving.packing import Slice, chosen_rows, fused, public_id, slices


def test_a_packed_step_is_cut_by_query_start_loc() -> None:
    # request "0" decodes its 6th token while "1" prefills 3: rows 0 and 1..3 of one (4, D) batch
    positions = torch.tensor([5, 0, 1, 2])
    found = slices(["0-1a2b3c4d", "1-9f8e7d6c"], [0, 1, 4], positions, [5, 3])
    assert found == [Slice("0", 0, 1, 5, 5), Slice("1", 1, 4, 0, 3)]


def test_public_ids_are_generates_own() -> None:
    assert public_id("12-0a1b2c3d") == "12"
    assert public_id("a") == "a"  # LLMEngine.add_request("a", ...): kept as given
    assert public_id("my-request") == "my-request"  # a dash before a word that is not hex: kept whole


def test_an_edit_limited_to_prompt_or_new_tokens() -> None:
    decode, prefill = Slice("0", 0, 1, 5, 5), Slice("1", 1, 4, 0, 3)
    assert chosen_rows(decode, "new").tolist() == [True]
    assert chosen_rows(prefill, "new").tolist() == [False, False, False]
    assert chosen_rows(prefill, "prompt").tolist() == [True, True, True]
    assert chosen_rows(prefill, [0, 2]).tolist() == [True, False, True]
    assert chosen_rows(prefill, None) is None


def test_the_fused_pair_is_summed_and_nothing_else() -> None:
    hidden, residual = torch.randn(4, 8), torch.randn(4, 8)
    assert torch.equal(fused((hidden, residual)), hidden + residual)
    assert fused((hidden, None)) is None  # qkv_proj's (out, None)
    assert fused(hidden) is None
