"""Steering a generation (``edits.add(v, positions="new")``) against a hand-written hook on one forward pass.

The oracle: the sequence ``generate`` produced, run once through the model with a plain forward
hook that adds ``v`` at positions ``>= P`` (P the prompt's length) by hand. Its logits at positions
``P - 1 ..`` are what each generation step saw, so the steered ``generate``, with and without the
KV cache, must give them; the unsteered prompt call must be bit-identical.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope import edits
from hookscope.errors import EditError

transformers = pytest.importorskip("transformers")
SITE, NEW = "transformer.h.1", 5


@pytest.fixture(scope="module")
def gpt2() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


PROMPT = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
V = torch.randn(32, generator=torch.Generator().manual_seed(1)) * 2


def _generate(model: nn.Module, *, use_cache: bool = True) -> list[Tensor]:
    options = {"output_logits": True, "return_dict_in_generate": True, "pad_token_id": 0, "use_cache": use_cache}
    out = model.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), max_new_tokens=NEW, do_sample=False, **options)
    return [step.detach() for step in out.logits], out.sequences


def _by_hand(model: nn.Module, sequences: Tensor, picked: Tensor) -> Tensor:
    """One forward pass of the whole sequence, ``V`` added at the positions ``picked`` (a (L,) bool) by hand."""

    def hook(module: nn.Module, args: object, output: Tensor) -> Tensor:
        return output + V * picked[: output.shape[1], None]

    handle = dict(model.named_modules())[SITE].register_forward_hook(hook)
    try:
        with torch.no_grad():
            return model(sequences).logits  # type: ignore[no-any-return]
    finally:
        handle.remove()


def test_new_tokens_only_leave_the_prompt_call_bit_identical_and_steer_each_decode_call(gpt2: nn.Module) -> None:
    plain, _ = _generate(gpt2)
    weights = {name: p.clone() for name, p in gpt2.state_dict().items()}
    block, calls = dict(gpt2.named_modules())[SITE], []
    counter = block.register_forward_hook(lambda module, args, out: calls.append(out.shape[1]))
    try:
        with hookscope.edit(gpt2, {SITE: edits.add(V, positions="new")}) as ed:
            steered, sequences = _generate(gpt2)
    finally:
        counter.remove()
    assert calls == [4, 1, 1, 1, 1] and len(steered) == NEW  # the prompt, then the 4 new tokens fed back
    assert all(torch.equal(p, weights[name]) for name, p in gpt2.state_dict().items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in gpt2.modules())
    assert torch.equal(steered[0], plain[0])  # the prompt call: not a bit changed
    assert all((s - p).abs().max() > 1e-3 for s, p in zip(steered[1:], plain[1:], strict=True))
    [row] = ed.report().rows
    assert row.calls == (1, 2, 3, 4) and row.changed == 4 * 2 * 32  # the 4 decode calls, one token each
    hand = _by_hand(gpt2, sequences, torch.arange(sequences.shape[1]) >= PROMPT.shape[1])
    for step, logits in enumerate(steered):
        torch.testing.assert_close(logits, hand[:, PROMPT.shape[1] - 1 + step], atol=1e-5, rtol=0)


def test_with_and_without_the_kv_cache_the_steered_logits_agree(gpt2: nn.Module) -> None:
    with hookscope.edit(gpt2, {SITE: edits.add(V, positions="new")}) as cached:
        with_cache, first = _generate(gpt2)
    with hookscope.edit(gpt2, {SITE: edits.add(V, positions="new")}) as again:
        without, second = _generate(gpt2, use_cache=False)
    assert torch.equal(first, second)
    for a, b in zip(with_cache, without, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert cached.report().rows[0].calls == again.report().rows[0].calls == (1, 2, 3, 4)
    # without the cache each call reads the whole sequence again: tokens 4.. of 5, 6, 7, 8 are new
    assert again.report().rows[0].changed == (1 + 2 + 3 + 4) * 2 * 32


@pytest.mark.parametrize("use_cache", [True, False])
def test_prompt_slice_and_mask_pick_the_same_positions_with_and_without_the_cache(
    gpt2: nn.Module, use_cache: bool
) -> None:
    length = PROMPT.shape[1] + NEW  # the sequence generate returns (the model reads all but its last token)
    mask = torch.zeros(length, dtype=torch.bool)
    mask[[1, 5, 7]] = True
    for positions, picked, calls in (
        ("prompt", torch.arange(length) < 4, (0,)),
        (slice(6, None), torch.arange(length) >= 6, (3, 4)),
        (mask, mask, (0, 2, 4)),
    ):
        with hookscope.edit(gpt2, {SITE: edits.add(V, positions=positions)}) as ed:
            steered, sequences = _generate(gpt2, use_cache=use_cache)
        hand = _by_hand(gpt2, sequences, picked)
        for step, logits in enumerate(steered):
            torch.testing.assert_close(logits, hand[:, 3 + step], atol=1e-5, rtol=0)
        assert ed.report().rows[0].calls == (calls if use_cache else tuple(c for c in range(NEW) if c >= calls[0]))


def test_match_norm_adds_the_vector_times_each_tokens_norm(gpt2: nn.Module) -> None:
    unit = V / V.norm()
    with hookscope.capture(gpt2, SITE) as cap, torch.no_grad():
        plain = gpt2(PROMPT).logits
    x = cap[SITE].output
    by_hand = dict(gpt2.named_modules())[SITE].register_forward_hook(
        lambda module, args, output: output + 0.5 * unit * x.norm(dim=-1, keepdim=True)
    )
    try:
        with torch.no_grad():
            expected = gpt2(PROMPT).logits
    finally:
        by_hand.remove()
    with hookscope.edit(gpt2, {SITE: edits.add(0.5 * unit, match_norm=True)}) as ed, torch.no_grad():
        steered = gpt2(PROMPT).logits
    torch.testing.assert_close(steered, expected, atol=1e-5, rtol=0)
    assert (steered - plain).abs().max() > 1e-3
    assert ed.report().rows[0].relative == pytest.approx(0.5, rel=1e-5)  # |0.5 |x| u| / |x| at every token


def test_new_tokens_only_is_an_error_when_no_decode_call_ran(gpt2: nn.Module) -> None:
    missed = r"positions='new' found no new token in 1 call\(s\).*model\.generate"
    with pytest.raises(EditError, match=missed), hookscope.edit(gpt2, {SITE: edits.add(V, positions="new")}):
        gpt2(PROMPT)
    assert not any(m._forward_hooks for m in gpt2.modules())


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"positions": "last"}, r"positions= is 'new', 'prompt', a slice, a bool mask or integer indices"),
        ({"positions": slice(-1, None)}, r"counts from the prompt's first token: ends >= 0"),
        ({"positions": "new", "call": 1}, r"positions='new' reads every call of a generation; drop call=1"),
        ({"positions": torch.zeros(0, dtype=torch.bool)}, r"a non-empty bool tensor"),
        ({"positions": "new", "kind": "grad_output"}, r"which backward reverses; give integer positions"),
        ({"match_norm": True, "vector": 2.0}, r"match_norm=True\) needs a \(D,\) vector"),
    ],
)
def test_bad_positions_are_refused_when_the_edit_is_made(options: dict[str, object], match: str) -> None:
    vector = options.pop("vector", V)
    with pytest.raises(EditError, match=match):
        edits.add(vector, **options)  # type: ignore[arg-type]


def test_a_llama_generation_is_steered_the_same_with_and_without_the_cache() -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=2, vocab_size=50, max_position_embeddings=32,
                                      bos_token_id=0, eos_token_id=0, pad_token_id=0)  # fmt: skip
    llama = transformers.LlamaForCausalLM(config).eval()
    plain, _ = _generate(llama)
    runs = []
    for use_cache in (True, False):
        with hookscope.edit(llama, {"model.layers.1": edits.add(V, positions="new")}) as ed:
            runs.append(_generate(llama, use_cache=use_cache)[0])
        assert ed.report().rows[0].calls == (1, 2, 3, 4)
    assert torch.equal(runs[0][0], plain[0]) and (runs[0][1] - plain[1]).abs().max() > 1e-3
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
