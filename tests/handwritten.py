"""Models written by hand, as a new user writes them: a small U-Net and an ``nn.Transformer`` seq2seq.

Other tests import them, and the command line loads them as ``tests/handwritten.py:unet``,
``tests/handwritten.py:seq2seq`` and ``tests/handwritten.py:token_model`` (each a function that
returns the model, seeded, in eval mode). The targets at the bottom are ``--target
tests/handwritten.py:centre_pixel``-style callables.

- ``UNet``: three levels down, each a double convolution, then one shared ``nn.MaxPool2d`` (called
  three times), a bottleneck, and three levels up, each a transposed convolution whose output is
  concatenated (``torch.cat``, dim 1) with the map of the same level on the way down: three skips.
  ``(B, 3, 32, 32)`` in, ``(B, 1, 32, 32)`` logits out (a segmentation mask).
- ``Seq2Seq``: source and target token embeddings, ``nn.Transformer`` (one encoder and one decoder
  layer, batch first), a causal mask on the target, a head to the vocabulary: ``(B, S)`` and
  ``(B, T)`` ids in, ``(B, T, VOCAB)`` logits out.
- ``TokenModel``: a one-layer ``nn.TransformerEncoder`` over token ids: ``(B, T)`` in, ``(B, T, VOCAB)`` out.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

VOCAB = 11


def double_conv(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1), nn.ReLU()
    )


class UNet(nn.Module):
    """Three levels down and up, three skip concatenations, one ``MaxPool2d`` shared by the levels."""

    def __init__(self, channels: int = 3, width: int = 4) -> None:
        super().__init__()
        w = width
        self.down1, self.down2, self.down3 = double_conv(channels, w), double_conv(w, 2 * w), double_conv(2 * w, 4 * w)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = double_conv(4 * w, 8 * w)
        self.up3, self.dec3 = nn.ConvTranspose2d(8 * w, 4 * w, 2, stride=2), double_conv(8 * w, 4 * w)
        self.up2, self.dec2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2), double_conv(4 * w, 2 * w)
        self.up1, self.dec1 = nn.ConvTranspose2d(2 * w, w, 2, stride=2), double_conv(2 * w, w)
        self.head = nn.Conv2d(w, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        s1 = self.down1(x)
        s2 = self.down2(self.pool(s1))
        s3 = self.down3(self.pool(s2))
        b = self.bottleneck(self.pool(s3))
        d3 = self.dec3(torch.cat([self.up3(b), s3], dim=1))
        d2 = self.dec2(torch.cat([self.up2(d3), s2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), s1], dim=1))
        return self.head(d1)


class Seq2Seq(nn.Module):
    """A translation model as the PyTorch tutorials write it, at toy size."""

    def __init__(self, vocab: int = VOCAB, dim: int = 16) -> None:
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, dim), nn.Embedding(vocab, dim)
        self.transformer = nn.Transformer(
            d_model=dim, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, dropout=0.0,
            batch_first=True,
        )  # fmt: skip
        self.head = nn.Linear(dim, vocab)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        out = self.transformer(self.src_embed(src), self.tgt_embed(tgt), tgt_mask=mask, tgt_is_causal=True)
        return self.head(out)


class TokenModel(nn.Module):
    """Token ids in, a logit per token and vocabulary entry out."""

    def __init__(self, vocab: int = VOCAB, dim: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(ids)))


def unet() -> UNet:
    torch.manual_seed(0)
    return UNet().eval()


def seq2seq() -> Seq2Seq:
    torch.manual_seed(0)
    return Seq2Seq().eval()


def token_model() -> TokenModel:
    torch.manual_seed(0)
    return TokenModel().eval()


def centre_pixel(output: Tensor) -> Tensor:
    """A ``--target file.py:function``: each image's mask logit at the centre pixel."""
    return output[:, 0, output.shape[2] // 2, output.shape[3] // 2]
