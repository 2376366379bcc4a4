"""How a mixture-of-experts model routed its tokens: ``routing(cap) -> Routing``.

A capture of ``":experts"`` (``hookscope.core.experts``) holds, for each fused experts module, one
site per expert with the tokens routed to it and their routing weights, and the router's logits.
``routing`` adds them up per experts module over every call the capture holds: tokens per expert,
their spread (the coefficient of variation: 0 when every expert got as many), the Switch
Transformer load-balancing loss (transformers' ``load_balancing_loss_func``: ``k`` when balanced) and
the mean routing weight of each expert. ``Routing`` shows itself as a table and as a report
section ("How are tokens routed to experts?").
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from ..base.display import Shows, plot_of, shows_as, table_of
from ..base.words import columns
from ..core.call import Call
from ..core.experts import EXPERT, EXPERTS, RouterStats, prob_sums, router_of, router_stats
from ..core.records import Record
from ..errors import NotCapturedError
from ..viz.charts import figure_image, new_figure
from ..viz.fonts import FONT, TITLE
from ..viz.fragments import Safe, image_tag, note, table, view

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(eq=False)
class Routing(Mapping[str, RouterStats], Shows):
    """The router statistics of each experts module of a capture, by the module's name.

    Attributes:
        layers: experts module name -> its ``RouterStats`` (tokens per expert, cv, aux_loss, mean_weight).
        routers: experts module name -> the name of its router (None when it was not captured).
    """

    layers: dict[str, RouterStats] = field(default_factory=dict)
    routers: dict[str, str | None] = field(default_factory=dict)

    def __getitem__(self, name: str) -> RouterStats:
        return self.layers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def table(self) -> str:
        """A row per experts module: tokens, experts per token, cv, load-balancing loss, least and most used experts.

        Returns:
            The table, as text.
        """
        return table_of(self)

    def plot(self) -> Image:
        """Each layer's share of the tokens per expert, a row per layer (a PIL image; white: a fair share).

        Returns:
            A PIL image.

        Raises:
            MissingDependencyError: matplotlib or Pillow is not installed.
        """
        image: Image = plot_of(self)
        return image


def routing(cap: Mapping[str, Record]) -> Routing:
    """The router statistics of every fused experts module that ``cap`` split into experts (``":experts"``).

    Args:
        cap: a finished capture whose selection held ``":experts"``, or a store of one (``hookscope.save``,
            ``hookscope.load``).

    Returns:
        A ``Routing``: per experts module, the tokens per expert over every call, their coefficient of
        variation, the load-balancing loss (when the router was captured too) and each expert's mean weight.

    Raises:
        NotCapturedError: ``cap`` has no per-expert sites, or holds no ``output`` of them.
    """
    experts = {name.rpartition(".")[0] for name, record in cap.items() if record.type == EXPERT}
    if not experts:
        raise NotCapturedError(
            f"this capture has no expert sites; capture with select={EXPERTS!r} (a mixture-of-experts model whose "
            "experts are fused 3-D parameters) and read routing(cap) after the block"
        )
    found = Routing()
    for name in [n for n in cap if n in experts]:
        count = _count(cap, name)
        found.routers[name] = _router_site(cap, name, count)
        found.layers[name] = _stats(cap, name, count, found.routers[name])
    return found


def _router_site(cap: Mapping[str, Record], name: str, count: int) -> str | None:
    """The site of the router beside the experts module ``name``: found in the model of a capture, else the
    sibling site whose output ends with ``count`` logits (a store); None when it was not captured."""
    model = getattr(cap, "model", None)
    if isinstance(model, nn.Module):
        named = list(model.named_modules())
        router = router_of(named, name) if name in dict(named) else None
        return router if router in cap else None
    parent = name.rpartition(".")[0]
    for site, record in cap.items():
        if site != name and record.type != EXPERT and site.rpartition(".")[0] == parent and record.calls:
            with contextlib.suppress(NotCapturedError):
                if record.calls[0].get("output").shape[-1] == count:
                    return site
    return None


def _stats(cap: Mapping[str, Record], name: str, count: int, router: str | None) -> RouterStats:
    """One experts module's ``RouterStats``, from its experts' sites and its router's logits."""
    sites = [cap[f"{name}.{e}"] for e in range(count)]
    tokens = torch.tensor([sum(len(c.get("output", "positions")) for c in r.calls) for r in sites], dtype=torch.float64)
    weights = torch.tensor([sum(float(c.get("output", "weight").sum()) for c in r.calls) for r in sites])
    probs, total = None, 0
    if router is not None:
        logits = [c.get("output") for c in cap[router].calls]
        probs = torch.stack([prob_sums(x) for x in logits]).sum(0) if logits else None
        total = sum(x.reshape(-1, x.shape[-1]).shape[0] for x in logits)
    else:
        total = sum(_rows(c) for c in cap[name].calls)
    return router_stats(tokens, total, weights.double(), probs)


def _count(cap: Mapping[str, Record], name: str) -> int:
    count = 0
    while f"{name}.{count}" in cap:
        count += 1
    return count


def _rows(call: Call) -> int:
    """The tokens of one call of an experts module: the rows of its output."""
    output = call.get("output")
    return int(output.reshape(-1, output.shape[-1]).shape[0])


def _row(name: str, stats: RouterStats) -> list[str]:
    tokens = stats.tokens
    least, most = int(tokens.argmin()), int(tokens.argmax())
    aux = "" if math.isnan(stats.aux_loss) else f"{stats.aux_loss:.4f}"
    return [name, str(stats.total), f"{stats.k:g}", f"{stats.cv:.3f}", aux,
            f"{least}: {int(tokens[least])}", f"{most}: {int(tokens[most])}"]  # fmt: skip


HEADER = ["experts", "tokens", "k", "cv", "balance loss", "least used", "most used"]


def routing_table(result: Routing) -> str:
    """A row per experts module (see ``Routing.table``), then each module's tokens per expert."""
    lines = columns([HEADER, *(_row(n, s) for n, s in result.items())], right=range(1, len(HEADER)))
    for name, stats in result.items():
        lines.append(f"{name}: tokens per expert {[int(t) for t in stats.tokens]}")
    return "\n".join(lines)


def routing_plot(result: Routing) -> Image:
    """A heatmap, a row per experts module and a column per expert: its share of the module's choices over the
    fair share (1 / experts), on a log scale centred on 1."""
    count = max(len(s.tokens) for s in result.values())
    shares = torch.full((len(result), count), float("nan"), dtype=torch.float64)
    for row, stats in enumerate(result.values()):
        shares[row, : len(stats.tokens)] = stats.tokens / stats.tokens.sum().clamp(min=1) * len(stats.tokens)
    label = max(len(name) for name in result)
    fig = new_figure(min(2.5 + 0.25 * count + 0.07 * label, 14.0), 1.4 + 0.3 * len(result))
    ax = fig.subplots()
    top = max(float(shares.nan_to_num(1.0).clamp(min=1e-3).log2().abs().max()), 1.0)
    shown = ax.imshow(shares.clamp(min=1e-3).log2().numpy(), cmap="RdBu_r", vmin=-top, vmax=top, aspect="auto")
    ax.set_yticks(range(len(result)), list(result), fontsize=FONT)
    if count <= 32:
        ax.set_xticks(range(count))
    ax.set_xlabel("expert", fontsize=FONT)
    ax.set_title("tokens per expert / a fair share (log2)", fontsize=TITLE)
    fig.colorbar(shown, ax=ax)
    return figure_image(fig)


def _place(result: Routing) -> tuple[str, str]:
    return "routing", "How are tokens routed to experts?"


@shows_as(Routing, table=routing_table, plot=routing_plot, section=_place)
def routing_html(result: Routing) -> Safe:
    """The table of ``routing_table`` and one row of tokens per expert for each module."""
    body = image_tag(result.plot(), alt="tokens per expert, a row per layer", width=None)
    body = Safe(body + table(HEADER, [_row(n, s) for n, s in result.items()], numeric=range(1, len(HEADER))))
    count = max((len(s.tokens) for s in result.values()), default=0)
    per_expert = [[name, *(str(int(t)) for t in s.tokens)] for name, s in result.items()]
    body = Safe(body + table(["tokens per expert", *map(str, range(count))], per_expert, numeric=range(1, count + 1)))
    said = "cv: std / mean of the tokens per expert (0: balanced); balance loss: the Switch Transformer auxiliary "
    said += "loss (k, the experts per token, when balanced; more when a few experts get most tokens)"
    return view(Safe(body + note(said)),
                title=f"Routing of {len(result)} mixture-of-experts layers")  # fmt: skip
