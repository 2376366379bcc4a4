"""One adapter per tool: ``make(model, ...)`` returns ``run(x)``, which captures and returns what it kept.

Peers are imported inside their adapters, so the smoke benchmark runs with hookscope, torch and
nothing else. Every adapter captures the same thing the same way a user of that tool would:
hooks registered and removed per run where the tool does so (hookscope, hand-written hooks,
Captum, pytorch-grad-cam, TorchCAM), one-time set-up outside the clock where the tool is built
once and reused (torchvision's FX extractor, nnsight's wrapper, TransformerLens' model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor, nn

import hookscope

Runner = Callable[[Tensor], Any]


def modules(model: nn.Module, names: Sequence[str]) -> list[tuple[str, nn.Module]]:
    """(name, module) for ``names``, in the order given."""
    table = dict(model.named_modules())
    return [(n, table[n]) for n in names]


def leaf_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if n and not any(m.children())]


def first_tensor(out: Any) -> Tensor:
    """A module's main output: the tensor itself, or the first item of a tuple (HF blocks)."""
    return out if isinstance(out, Tensor) else out[0]


# -- hookscope and the floor: hand-written hooks ------------------------------------------------------
def hookscope_forward(model: nn.Module, select: Any, **options: Any) -> Runner:
    def run(x: Tensor) -> hookscope.Capture:
        with hookscope.capture(model, select, **options) as cap:
            model(x)
        return cap

    return run


def hookscope_backward(model: nn.Module, select: Any, loss: Callable[[Any], Tensor]) -> Runner:
    def run(x: Tensor) -> hookscope.Capture:
        with hookscope.capture(model, select, kinds=("output", "grad_output")) as cap:
            loss(model(x)).backward()
        return cap

    return run


def hand_forward(model: nn.Module, names: Sequence[str], *, clone: bool = True) -> Runner:
    """Forward hooks that clone (or only keep) each output: what one writes without a library."""
    chosen = modules(model, names)

    def run(x: Tensor) -> dict[str, list[Tensor]]:
        store: dict[str, list[Tensor]] = {name: [] for name in names}

        def hook(name: str) -> Callable[[nn.Module, Any, Any], None]:
            keep = store[name].append
            if clone:
                return lambda module, args, out: keep(first_tensor(out).detach().clone())
            return lambda module, args, out: keep(first_tensor(out))

        handles = [m.register_forward_hook(hook(n)) for n, m in chosen]
        try:
            model(x)
        finally:
            for h in handles:
                h.remove()
        return store

    return run


def hand_backward(model: nn.Module, names: Sequence[str], loss: Callable[[Any], Tensor]) -> Runner:
    """Forward hooks that clone each output and hang a cloning ``Tensor.register_hook`` on it."""
    chosen = modules(model, names)

    def run(x: Tensor) -> dict[str, list[Tensor]]:
        outs: dict[str, list[Tensor]] = {name: [] for name in names}
        grads: dict[str, list[Tensor]] = {name: [] for name in names}

        def hook(name: str) -> Callable[[nn.Module, Any, Tensor], None]:
            def forward(module: nn.Module, args: Any, out: Tensor) -> None:
                outs[name].append(out.detach().clone())
                out.register_hook(lambda g: grads[name].append(g.clone()))

            return forward

        handles = [m.register_forward_hook(hook(n)) for n, m in chosen]
        try:
            loss(model(x)).backward()
        finally:
            for h in handles:
                h.remove()
        return {"out": outs, "grad": grads}

    return run


def full_backward_hooks(model: nn.Module, names: Sequence[str], loss: Callable[[Any], Tensor]) -> Runner:
    """``register_full_backward_hook`` for the gradients, a cloning forward hook for the outputs."""
    chosen = modules(model, names)

    def run(x: Tensor) -> dict[str, list[Tensor]]:
        outs: dict[str, list[Tensor]] = {name: [] for name in names}
        grads: dict[str, list[Tensor]] = {name: [] for name in names}
        handles = []
        for name, m in chosen:
            handles.append(m.register_forward_hook(lambda mod, a, o, n=name: outs[n].append(o.detach().clone())))
            handles.append(m.register_full_backward_hook(lambda mod, gi, go, n=name: grads[n].append(go[0].clone())))
        try:
            loss(model(x)).backward()
        finally:
            for h in handles:
                h.remove()
        return {"out": outs, "grad": grads}

    return run


# -- peers ------------------------------------------------------------------------------------------
def fx_extractor(model: nn.Module, names: Sequence[str]) -> Runner:
    """torchvision's ``create_feature_extractor``: traced once (outside the clock), no copies."""
    from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

    wanted = set(names)
    _, nodes = get_graph_node_names(model)
    calls = [n for n in nodes if n in wanted or (n.rpartition("_")[0] in wanted and n.rpartition("_")[2].isdigit())]
    seen = {n.rpartition("_")[0] if n not in wanted else n for n in calls}
    chosen = calls + [n for n in names if n not in seen]  # a container's name: the output of its last node
    extractor = create_feature_extractor(model, return_nodes=chosen)
    return lambda x: extractor(x)


def captum_activation(model: nn.Module, names: Sequence[str]) -> Runner:
    """Captum ``LayerActivation`` over a list of layers (the last call of a reused module wins)."""
    from captum.attr import LayerActivation

    layers = [m for _, m in modules(model, names)]
    return lambda x: LayerActivation(model, layers).attribute(x)


def torchlens_trace(model: nn.Module, names: Sequence[str] | None = None) -> Runner:
    """TorchLens ``trace`` (formerly ``log_forward_pass``): every op by default, or named layers."""
    import torchlens as tl

    # unwrap_when_done: TorchLens wraps torch functions on first use; unwrapping keeps the bare runs
    # of the same process (and the cost of wrapping) honest.
    options = tl.options.CaptureOptions(unwrap_when_done=True)
    if names is not None:
        options = tl.options.CaptureOptions(layers_to_save=list(names), unwrap_when_done=True)
    return lambda x: tl.trace(model, x, capture=options)


def torchlens_record(model: nn.Module) -> Runner:
    """TorchLens' fast ``record`` path, keeping every module's output."""
    import torchlens as tl

    return lambda x: tl.record(model, x, default_module=True, default_op=False)


def torchlens_backward(model: nn.Module, loss: Callable[[Any], Tensor]) -> Runner:
    """TorchLens ``record`` with every module's output and gradient, then backward."""
    import torchlens as tl

    def run(x: Tensor) -> Any:
        out, rec = tl.record(model, x, default_module=True, default_op=False, save_grads=True, return_output=True)
        loss(out).backward()
        return rec

    return run


def nnsight_forward(model: nn.Module, names: Sequence[str], *, clone: bool = True) -> Runner:
    """nnsight: ``.output.save()`` per module (cloned first, as its docs advise for in-place models)."""
    from nnsight import NNsight

    wrapped = NNsight(model)

    def run(x: Tensor) -> dict[str, Any]:
        saved: dict[str, Any] = {}
        with wrapped.trace(x):
            for name in names:
                out = _envoy(wrapped, name).output
                saved[name] = (out.clone() if clone else out).save()
        return saved

    return run


def nnsight_block_outputs(model: nn.Module, names: Sequence[str]) -> Runner:
    """nnsight on modules that return tuples (HF blocks): the first item, cloned."""
    from nnsight import NNsight

    wrapped = NNsight(model)

    def run(x: Tensor) -> dict[str, Any]:
        saved: dict[str, Any] = {}
        with wrapped.trace(x):
            for name in names:
                out = _envoy(wrapped, name).output
                out = out[0] if isinstance(out, tuple) else out
                saved[name] = out.clone().save()
        return saved

    return run


def nnsight_backward(model: nn.Module, names: Sequence[str]) -> Runner:
    """nnsight: outputs saved in the trace, their ``.grad`` inside ``with loss.backward()`` (loss: sum)."""
    from nnsight import NNsight

    wrapped = NNsight(model)

    def run(x: Tensor) -> dict[str, Any]:
        outs: dict[str, Any] = {}
        grads: dict[str, Any] = {}
        with wrapped.trace(x):
            live = [_envoy(wrapped, name).output for name in names]
            for name, out in zip(names, live, strict=True):
                outs[name] = out.clone().save()
            total = wrapped.output.sum()
            with total.backward():
                for name, out in zip(reversed(names), reversed(live), strict=True):
                    grads[name] = out.grad.clone().save()
        return {"out": outs, "grad": grads}

    return run


def _envoy(wrapped: Any, name: str) -> Any:
    envoy = wrapped
    for part in name.split("."):
        envoy = envoy[int(part)] if part.isdigit() else getattr(envoy, part)
    return envoy


def unpack(tool: str, result: Any) -> Any:
    """Nested tensors from a tool's result (None where the tool's object is opaque to us)."""
    if isinstance(result, hookscope.Capture):
        return [
            t for record in result.values() for call in record.calls for d in call.tensors.values() for t in d.values()
        ]
    if isinstance(result, (dict, list, tuple, Tensor)):
        return result
    cache = getattr(result, "cache_dict", None)  # TransformerLens ActivationCache
    return cache if isinstance(cache, dict) else None
