"""patch_sweep at layers returning a tuple: a small random T5 encoder, whose blocks return
``(hidden_states, position_bias)``, against a loop of plain torch forward hooks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hookscope
from hookscope.errors import OptionError

transformers = pytest.importorskip("transformers")

CLEAN = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
CORRUPT = torch.tensor([[1, 2, 30, 4, 5], [6, 7, 8, 40, 10]])
SITES = ["encoder.block.0", "encoder.block.1.layer.0"]


def t5() -> Any:
    config = transformers.T5Config(
        vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2, decoder_start_token_id=0
    )
    torch.manual_seed(0)
    return transformers.T5EncoderModel(config).double().eval()


def last_token(output: Any) -> Tensor:
    return output.last_hidden_state[:, -1, :3].sum(-1)


def by_hand(model: nn.Module, site: str, position: int, target: Callable[[Any], Tensor] = last_token) -> float:
    """The restored fraction of ``target`` by torch's own hooks: clean hidden states of ``site`` at ``position``."""
    module = model.get_submodule(site)
    held: list[Tensor] = []
    handle = module.register_forward_hook(lambda m, a, out: held.append(out[0]))
    with torch.no_grad():
        m_clean = float(target(model(CLEAN)).mean())
    handle.remove()

    def patch(m: nn.Module, a: Any, out: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        hidden = out[0].clone()
        hidden[:, position] = held[0][:, position]
        return (hidden, *out[1:])

    with torch.no_grad():
        m_corrupt = float(target(model(CORRUPT)).mean())
        handle = module.register_forward_hook(patch)
        m_patched = float(target(model(CORRUPT)).mean())
    handle.remove()
    return (m_patched - m_corrupt) / (m_clean - m_corrupt)


def test_a_tuple_of_hidden_states_and_bias_patches_the_hidden_states_by_default() -> None:
    model = t5()
    sweep = hookscope.patch_sweep(model, CLEAN, CORRUPT, target=last_token, select=SITES, batch_size=3)
    for site in SITES:
        assert len(sweep.restored[site]) == 5  # type: ignore[arg-type]
        for position in range(5):
            assert sweep.fraction(site, position) == pytest.approx(by_hand(model, site, position), abs=1e-9)
    named = hookscope.patch_sweep(model, CLEAN, CORRUPT, target=last_token, select=SITES, key="out[0]")
    for site in SITES:
        assert named.restored[site] == pytest.approx(sweep.restored[site], abs=1e-12)
    assert sweep.fraction(SITES[1], 4) == pytest.approx(1.0)  # the last token's stream after block 1's attention
    assert sweep.fraction(SITES[1], 0) == pytest.approx(0.0, abs=1e-12)  # the only later layer reads no token 0


class Pair(nn.Module):
    """Returns ``(pooled (B, D), tokens (B, T, D))``: its first tensor is not the hidden states."""

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x.mean(1), x


class Pooled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pair = Pair()

    def forward(self, x: Tensor) -> Tensor:
        pooled, tokens = self.pair(x)
        return pooled + tokens[:, -1]


def test_a_tuple_whose_first_tensor_is_not_the_hidden_states_still_asks_for_key() -> None:
    x = torch.arange(24.0).view(2, 3, 4)
    with pytest.raises(OptionError, match=r"returns out\[0\], out\[1\] and its first is not \(B, T, D\) hidden"):
        hookscope.patch_sweep(Pooled(), x, -x, target=lambda out: out.sum(-1), select="pair")
    sweep = hookscope.patch_sweep(Pooled(), x, -x, target=lambda out: out.sum(-1), select="pair", key="out[1]")
    last, mean = x[:, -1].sum(-1).mean(), x.mean(1).sum(-1).mean()  # 62 and 46: the clean metric's two terms
    assert sweep.fraction("pair", 2) == pytest.approx(float(last / (last + mean)))  # the mean stays corrupted


class Seq2Seq(nn.Module):
    """A T5 translating with a fixed decoder prompt: one tensor in (the source ids), the logits out."""

    def __init__(self) -> None:
        super().__init__()
        config = transformers.T5Config(vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2,
                                       num_heads=2, decoder_start_token_id=0)  # fmt: skip
        torch.manual_seed(0)
        self.t5 = transformers.T5ForConditionalGeneration(config).double().eval()
        self.register_buffer("prompt", torch.tensor([[0, 11, 12]]))  # 3 positions, not the input's 5

    def forward(self, input_ids: Tensor) -> Tensor:  # any number of rows: patch_sweep stacks copies of the batch
        return self.t5(input_ids=input_ids, decoder_input_ids=self.prompt.expand(len(input_ids), -1)).logits


def next_token(output: Tensor) -> Tensor:
    return output[:, -1, 7] - output[:, -1, 3]


def test_an_encoder_decoder_patches_its_encoder_blocks_by_default_and_its_decoder_blocks_when_named() -> None:
    model = Seq2Seq()
    sweep = hookscope.patch_sweep(model, CLEAN, CORRUPT, target=next_token, batch_size=4)
    encoder = ["t5.encoder.block.0", "t5.encoder.block.1"]
    assert list(sweep.restored) == encoder  # the decoder's blocks (3 positions, not the input's 5) are not asked for
    for site in encoder:
        assert [sweep.fraction(site, p) for p in range(5)] == pytest.approx(
            [by_hand(model, site, p, next_token) for p in range(5)], abs=1e-9
        )
    decoder = hookscope.patch_sweep(model, CLEAN, CORRUPT, target=next_token, select=r"re:t5\.decoder\.block\.\d$")
    assert list(decoder.restored) == ["t5.decoder.block.0", "t5.decoder.block.1"]
    for site in decoder.restored:
        assert len(decoder.restored[site]) == 3  # type: ignore[arg-type]  # the decoder's own positions
        assert [decoder.fraction(site, p) for p in range(3)] == pytest.approx(
            [by_hand(model, site, p, next_token) for p in range(3)], abs=1e-9
        )
    assert decoder.fraction("t5.decoder.block.1", 2) == pytest.approx(1.0)  # the last position's whole stream
