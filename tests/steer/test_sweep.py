"""``steer_sweep`` against hand-written hooks, a planted direction and random ones, on a tiny random GPT-2.

The planted direction is the difference of two unembedding rows, ``W[7] - W[9]``: added to the last
block's output it raises token 7's logit against token 9's (through the final LayerNorm), so the
propensity ``log p(7) - log p(9)`` must rise with the scale on every prompt. Random directions of the
same norm (seeded) must average a slope of 0 within their own noise. The numbers at one scale are
checked against a forward hook written by hand, the slopes against numpy's least squares.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.base.display import section_of
from hookscope.errors import EditError, OptionError

transformers = pytest.importorskip("transformers")
SITE, A, B = "transformer.h.1", 7, 9


@pytest.fixture(scope="module")
def gpt2() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32,
                                     bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


PROMPTS = torch.randint(1, 50, (8, 5), generator=torch.Generator().manual_seed(0))
NEUTRAL = torch.randint(1, 50, (4, 6), generator=torch.Generator().manual_seed(1))


def _planted(model: nn.Module) -> Tensor:
    weight = model.lm_head.weight.detach()  # type: ignore[union-attr]
    return weight[A] - weight[B]


def _by_hand(model: nn.Module, x: Tensor, added: Tensor) -> Tensor:
    """The logits with ``added`` put on the block's output by a plain forward hook."""
    handle = dict(model.named_modules())[SITE].register_forward_hook(lambda module, args, out: out + added)
    try:
        with torch.no_grad():
            return model(x).logits.double()  # type: ignore[no-any-return]
    finally:
        handle.remove()


def test_a_planted_direction_steers_every_prompt_and_the_numbers_are_the_hand_computed_ones(gpt2: nn.Module) -> None:
    v = _planted(gpt2)
    scales = (-2.0, -1.0, 0.0, 1.0, 2.0)
    sweep = hookscope.steer_sweep(gpt2, PROMPTS, v, select=SITE, completions=(A, B), scales=scales)
    for i, scale in enumerate(scales):
        read = _by_hand(gpt2, torch.cat([PROMPTS, torch.full((8, 1), A)], dim=1), scale * v)[:, 4].log_softmax(-1)
        torch.testing.assert_close(sweep.propensity[:, i], read[:, A] - read[:, B], atol=1e-6, rtol=0)
    expected = [np.polyfit(scales, row, 1)[0] for row in sweep.propensity.numpy()]
    np.testing.assert_allclose(sweep.slopes.numpy(), expected, atol=1e-9)
    assert (sweep.slopes > 0).all() and sweep.anti_steerable == 0.0
    assert sweep.spread == pytest.approx(float(np.std(expected, ddof=1)))


def test_random_directions_of_the_same_norm_average_a_slope_of_zero(gpt2: nn.Module) -> None:
    v = _planted(gpt2)
    planted = hookscope.steer_sweep(gpt2, PROMPTS, v, select=SITE, completions=(A, B), scales=(-1.0, 1.0))
    generator = torch.Generator().manual_seed(2)
    found = []
    for _ in range(8):
        r = torch.randn(32, generator=generator)
        sweep = hookscope.steer_sweep(gpt2, PROMPTS, r * v.norm() / r.norm(), select=SITE, completions=(A, B),
                                      scales=(-1.0, 1.0))  # fmt: skip
        found.append(sweep.steerability)
    random = torch.tensor(found)
    assert abs(float(random.mean())) < 3 * float(random.std()) / len(found) ** 0.5  # 0 within its standard error
    assert planted.steerability > 2 * float(random.abs().max())


def test_the_side_effect_grows_with_the_scale_and_the_tally_equals_the_calls_made(gpt2: nn.Module) -> None:
    block, seen = dict(gpt2.named_modules())[SITE], []
    counter = block.register_forward_hook(lambda module, args, out: seen.append(1))
    try:
        sweep = hookscope.steer_sweep(gpt2, PROMPTS, _planted(gpt2) * 4, select=SITE, completions=(A, B),
                                      neutral=NEUTRAL, scales=(-2.0, -1.0, 0.0, 1.0, 2.0), batch_size=4)  # fmt: skip
    finally:
        counter.remove()
    assert sweep.kl is not None
    kl = sweep.kl.tolist()
    assert kl[2] == 0.0 and 0 < kl[1] < kl[0] and 0 < kl[3] < kl[4]
    # per scale: 2 prompt batches x 2 completions + 1 neutral batch (none at scale 0, the model itself)
    assert sweep.forwards == (5, 5, 4, 5, 5) and sum(sweep.forwards) + 1 == len(seen)  # + the unsteered neutral pass
    assert sweep.edited == (5, 5, 0, 5, 5)


def test_a_target_callable_and_a_direction_with_a_vector_per_site(gpt2: nn.Module) -> None:
    vectors = {"transformer.h.0": _planted(gpt2), "transformer.h.1": -_planted(gpt2)}

    class Direction:
        def vector(self, site: str) -> Tensor:
            return vectors[site]

    def target(out: object) -> Tensor:
        read = out.logits[:, -1].log_softmax(-1)  # type: ignore[attr-defined]
        return read[:, A] - read[:, B]  # type: ignore[no-any-return]

    sweep = hookscope.steer_sweep(gpt2, PROMPTS, Direction(), select=list(vectors), target=target, scales=(0.0, 1.0))
    modules = dict(gpt2.named_modules())
    hooks = [modules[s].register_forward_hook(lambda m, a, o, v=v: o + v) for s, v in vectors.items()]
    try:
        with torch.no_grad():
            read = gpt2(PROMPTS).logits[:, -1].double().log_softmax(-1)
    finally:
        for hook in hooks:
            hook.remove()
    torch.testing.assert_close(sweep.propensity[:, 1], read[:, A] - read[:, B], atol=1e-6, rtol=0)
    assert sweep.sites == ("transformer.h.0", "transformer.h.1") and sweep.edited == (0, 2)


def test_completions_of_several_tokens_sum_their_log_probabilities(gpt2: nn.Module) -> None:
    a, b = torch.tensor([[A, 3]] * 8), torch.tensor([[B, 4]] * 8)
    sweep = hookscope.steer_sweep(gpt2, PROMPTS, _planted(gpt2), select=SITE, completions=(a, b), scales=(0.0, 1.0))
    sides = []
    for tokens in (a, b):
        read = _by_hand(gpt2, torch.cat([PROMPTS, tokens], dim=1), _planted(gpt2)).log_softmax(-1)
        sides.append(read[:, 4].gather(-1, tokens[:, :1]) + read[:, 5].gather(-1, tokens[:, 1:]))
    torch.testing.assert_close(sweep.propensity[:, 1], (sides[0] - sides[1]).squeeze(-1), atol=1e-6, rtol=0)


def test_the_sweep_shows_itself(gpt2: nn.Module) -> None:
    sweep = hookscope.steer_sweep(gpt2, PROMPTS, _planted(gpt2), select=SITE, completions=(A, B),
                                  neutral=NEUTRAL, scales=(-1.0, 0.0, 1.0))  # fmt: skip
    lines = sweep.table().splitlines()
    assert lines[0].split() == ["scale", "propensity", "spread", "KL", "(neutral)", "calls", "edited", "forward",
                                "passes"]  # fmt: skip
    assert lines[-1].startswith("steerability (mean slope) ") and "anti-steerable: 0 of 8 (0%)" in lines[-1]
    assert sweep.plot().size[0] > 800
    html = sweep._repr_html_()
    assert html is not None and "<img" in html and "anti-steerable" in html
    place = section_of(sweep)
    assert place is not None and place[:2] == ("steering", "Does the steering work?")
    cnn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).eval()
    report = hookscope.build_report(cnn, torch.rand(1, 3, 8, 8), sections=[sweep], graph=False)
    assert [s.id for s in report.sections] == ["steering"]
    assert "Does the steering work?" in hookscope.render_html(report)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({}, OptionError, r"needs target= \(a callable of the output\) or completions=\(a, b\)"),
        ({"completions": (A, B), "scales": (1.0, 1.0)}, OptionError, r"two different scales or more"),
        ({"completions": (A, torch.ones(3, dtype=torch.long))}, OptionError, r"3 rows for 8 prompts"),
        ({"completions": (A, B), "positions": "new"}, EditError, r"positions='new' found no new token"),
    ],
)
def test_bad_sweeps_are_refused(gpt2: nn.Module, options: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        hookscope.steer_sweep(gpt2, PROMPTS, _planted(gpt2), select=SITE, **options)  # type: ignore[arg-type]
    assert not any(m._forward_hooks for m in gpt2.modules())


def test_a_direction_without_the_site_is_refused(gpt2: nn.Module) -> None:
    class Direction:
        def __init__(self) -> None:
            self.vectors = {"transformer.h.0": torch.ones(32)}

    class Method:
        def vector(self, site: str) -> Tensor:
            return {"transformer.h.0": torch.ones(32)}[site]

    for direction in (Direction(), Method()):
        with pytest.raises(OptionError, match=r"has none for 'transformer.h.1' in a (Direction|Method)"):
            hookscope.steer_sweep(gpt2, PROMPTS, direction, select=SITE, completions=(A, B))
