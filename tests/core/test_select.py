"""hookscope.select_modules and hookscope.list_modules: selectors to (name, module) pairs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torchvision
from torch import nn

import hookscope
from hookscope import ModuleInfo, SelectionError, list_modules, select_modules

LIST_HINT = re.escape("hookscope.list_modules(model)")


@pytest.fixture(scope="module")
def resnet() -> nn.Module:
    return torchvision.models.resnet18()


class Small(nn.Module):
    """conv 2*1*3*3+2 = 20, block.0 4*3+3 = 15, head 3*1 = 3 parameters: 38 in all."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Sequential(nn.ReLU(), nn.Flatten()))
        self.block = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        self.head = nn.Linear(3, 1, bias=False)


class Shared(nn.Module):
    """One Linear registered as both .a and .b."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.mid = nn.ReLU()
        self.b = self.a


def names(pairs: list[tuple[str, nn.Module]]) -> list[str]:
    return [n for n, _ in pairs]


# -- what selectors match ------------------------------------------------------------------------


def test_exact_name(resnet):
    """A dotted name selects that one module, as the same object."""
    assert select_modules(resnet, "layer1.0.conv2") == [("layer1.0.conv2", resnet.layer1[0].conv2)]


def test_empty_name_is_root(resnet):
    """The empty name selects the model itself."""
    assert select_modules(resnet, "") == [("", resnet)]


def test_glob_crosses_dots(resnet):
    """layer*.conv2 on resnet18 matches exactly the eight block conv2s, in model order."""
    expected = [f"layer{i}.{j}.conv2" for i in range(1, 5) for j in range(2)]
    assert names(select_modules(resnet, "layer*.conv2")) == expected


def test_glob_question_mark_and_class(resnet):
    """? and [...] behave as in fnmatch."""
    assert names(select_modules(resnet, "layer?.1.bn?")) == [f"layer{i}.1.bn{j}" for i in range(1, 5) for j in (1, 2)]
    assert names(select_modules(resnet, "layer[12].0.conv1")) == ["layer1.0.conv1", "layer2.0.conv1"]


def test_glob_features_star_selects_all_descendants():
    """features.* matches every module below features, at any depth, but not features itself."""
    model = Small()
    assert names(select_modules(model, "features.*")) == ["features.0", "features.1", "features.1.0", "features.1.1"]


def test_glob_star_excludes_root():
    """A bare * matches every named module but not the root."""
    model = Small()
    assert names(select_modules(model, "*")) == [n for n, _ in model.named_modules() if n]


def test_regex_fullmatch(resnet):
    """re: selectors must match the whole name."""
    assert names(select_modules(resnet, r"re:layer[12]\.0\.conv\d")) == [
        "layer1.0.conv1",
        "layer1.0.conv2",
        "layer2.0.conv1",
        "layer2.0.conv2",
    ]
    assert names(select_modules(resnet, "re:conv1")) == ["conv1"]


def test_type_matches_isinstance(resnet):
    """A module type selects every instance; the count equals a manual count (20 convs in resnet18)."""
    convs = select_modules(resnet, nn.Conv2d)
    assert len(convs) == 20 == sum(isinstance(m, nn.Conv2d) for m in resnet.modules())
    assert all(isinstance(m, nn.Conv2d) for _, m in convs)


def test_type_includes_subclasses_and_root():
    """Type matching uses isinstance, so nn.Module selects every module, the root included."""
    model = Small()
    assert names(select_modules(model, nn.Module)) == [n for n, _ in model.named_modules()]


def test_predicate(resnet):
    """A (name, module) -> bool predicate selects what it accepts."""
    picked = select_modules(resnet, lambda n, m: isinstance(m, nn.BatchNorm2d) and n.startswith("layer4"))
    assert names(picked) == ["layer4.0.bn1", "layer4.0.bn2", "layer4.0.downsample.1", "layer4.1.bn1", "layer4.1.bn2"]


def test_predicate_truthy_value():
    """A predicate's return value is used for its truth, not identity with True."""
    model = Small()
    assert names(select_modules(model, lambda n, m: n.count("."))) == [n for n, _ in model.named_modules() if "." in n]


def test_list_is_union_in_model_order(resnet):
    """A list selects the union of its entries, in model order, whatever the list order."""
    assert names(select_modules(resnet, ["fc", nn.MaxPool2d, "conv1"])) == ["conv1", "maxpool", "fc"]


def test_list_has_no_duplicates(resnet):
    """Overlapping entries select each module once."""
    picked = select_modules(resnet, ["conv1", "conv1", nn.Conv2d, "re:conv.", ("layer1.0.conv1",)])
    assert len(picked) == len({id(m) for _, m in picked}) == 20


def test_none_selects_every_leaf(resnet):
    """None selects every module with no children, in model order."""
    leaves = [n for n, m in resnet.named_modules() if not list(m.children())]
    assert names(select_modules(resnet)) == leaves
    assert "fc" in leaves
    assert "layer1" not in leaves


def test_none_on_childless_model_is_root():
    """A model with no children is its own only leaf."""
    model = nn.Linear(2, 2)
    assert select_modules(model, None) == [("", model)]


def test_shared_module_appears_once():
    """A module registered under two names is selected once, under its first name."""
    model = Shared()
    assert select_modules(model, nn.Linear) == [("a", model.a)]
    assert names(select_modules(model)) == ["a", "mid"]
    assert names(select_modules(model, "*")) == ["a", "mid"]


def test_shared_module_second_name():
    """model.b is a valid dotted path (model.get_submodule('b') works), so selecting it finds the module."""
    model = Shared()
    assert model.get_submodule("b") is model.a
    ((_, module),) = select_modules(model, "b")
    assert module is model.a


# -- what selectors refuse ---------------------------------------------------------------------


def test_unknown_name_suggests_closest(resnet):
    """A name that does not exist names the closest names and hookscope.list_modules."""
    with pytest.raises(SelectionError, match=r"'layer1\.0\.conv3' matched no module of ResNet") as err:
        select_modules(resnet, "layer1.0.conv3")
    message = str(err.value)
    assert "closest: 'layer1.0.conv2', 'layer1.0.conv1'" in message
    assert "hookscope.list_modules" in message


def test_glob_matching_nothing(resnet):
    """A glob that matches nothing is an error, not an empty selection."""
    with pytest.raises(SelectionError, match=rf"'layer9\*' matched no module.*{LIST_HINT}"):
        select_modules(resnet, "layer9*")


def test_absent_type(resnet):
    """A type absent from the model is an error listing the types present."""
    with pytest.raises(SelectionError, match=r"type LSTM matched no module of ResNet.*types present: .*Conv2d"):
        select_modules(resnet, nn.LSTM)


def test_predicate_matching_nothing(resnet):
    """A predicate that accepts nothing is an error naming the predicate."""

    def never(name: str, module: nn.Module) -> bool:
        return False

    with pytest.raises(SelectionError, match=rf"predicate never matched no module.*{LIST_HINT}"):
        select_modules(resnet, never)


def test_one_bad_entry_in_list(resnet):
    """A list fails when any one entry matches nothing, and the error names that entry."""
    with pytest.raises(SelectionError, match=r"'nope' matched no module"):
        select_modules(resnet, ["conv1", "nope", nn.Conv2d])


@pytest.mark.parametrize("empty", [[], (), ["conv1", []]])
def test_empty_list(resnet, empty):
    """An empty selector list, even nested, is an error rather than selecting nothing."""
    with pytest.raises(SelectionError, match="the selector list is empty"):
        select_modules(resnet, empty)


def test_invalid_regex(resnet):
    """An invalid re: pattern is a SelectionError, not a re.error."""
    with pytest.raises(SelectionError, match=r"'re:layer\[' is not a valid regular expression"):
        select_modules(resnet, "re:layer[")


def test_invalid_regex_on_childless_model():
    """The regex is reported invalid even when the model has no named submodule to test it on."""
    with pytest.raises(SelectionError, match="is not a valid regular expression"):
        select_modules(nn.Linear(2, 2), "re:layer[")


@pytest.mark.parametrize("bad", [3, 2.5, True, b"conv1", {"conv1": 1}])
def test_not_a_selector(resnet, bad):
    """A value that is no kind of selector is a SelectionError saying so."""
    with pytest.raises(SelectionError, match="is not a selector; pass a module name"):
        select_modules(resnet, bad)


def test_a_class_that_is_not_a_module_is_not_a_selector(resnet):
    """A class that is not an nn.Module subclass is a SelectionError, not a call as a predicate."""
    with pytest.raises(SelectionError, match="is not a selector"):
        select_modules(resnet, int)


def test_module_objects_select_themselves(resnet):
    """A module object selects itself under its name; a foreign module is a SelectionError."""
    assert select_modules(resnet, [resnet.layer4, resnet.conv1]) == [("conv1", resnet.conv1), ("layer4", resnet.layer4)]
    with pytest.raises(SelectionError, match=r"module Linear \(not a submodule of this model\) matched no module"):
        select_modules(resnet, nn.Linear(2, 2))


@pytest.mark.parametrize("model", [None, "resnet", {"conv1": nn.Conv2d(1, 1, 1)}, nn.Conv2d])
def test_non_module_model(model):
    """select_modules and list_modules refuse anything but an nn.Module instance."""
    with pytest.raises(SelectionError, match=r"expected a torch\.nn\.Module, got "):
        select_modules(model, "conv1")
    with pytest.raises(SelectionError, match=r"expected a torch\.nn\.Module, got "):
        list_modules(model)


# -- list_modules --------------------------------------------------------------------------------


def test_list_modules_hand_count():
    """Names, types, parameter counts (module and children), depth and leaf flags match a hand count."""
    assert list_modules(Small()) == [
        ModuleInfo("", "Small", 38, 0, False),
        ModuleInfo("features", "Sequential", 20, 1, False),
        ModuleInfo("features.0", "Conv2d", 20, 2, True),
        ModuleInfo("features.1", "Sequential", 0, 2, False),
        ModuleInfo("features.1.0", "ReLU", 0, 3, True),
        ModuleInfo("features.1.1", "Flatten", 0, 3, True),
        ModuleInfo("block", "Sequential", 15, 1, False),
        ModuleInfo("block.0", "Linear", 15, 2, True),
        ModuleInfo("block.1", "ReLU", 0, 2, True),
        ModuleInfo("head", "Linear", 3, 1, True),
    ]


def test_list_modules_shared_counted_once():
    """A shared module is listed once and its parameters count once at the root."""
    assert [(i.name, i.params) for i in list_modules(Shared())] == [("", 6), ("a", 6), ("mid", 0)]


def test_list_modules_resnet_totals(resnet):
    """The root's count equals every parameter; names follow named_modules; leaves agree with None."""
    infos = list_modules(resnet)
    assert infos[0].params == sum(p.numel() for p in resnet.parameters()) == 11_689_512
    assert [i.name for i in infos] == [n for n, _ in resnet.named_modules()]
    assert [i.name for i in infos if i.leaf] == names(select_modules(resnet))
    assert max(i.depth for i in infos) == 4  # layer1.0.downsample.0


def test_list_modules_exported():
    """list_modules is the public hookscope.list_modules."""
    assert hookscope.list_modules is list_modules


def test_select_none_picks_every_leaf_where_the_table_says_so(tmp_path: Path) -> None:
    """core/select.py's table: None is every leaf module in capture, extract, patch_sweep, compare.divergence
    (the leaves of select_modules(model), the oracle: modules without children, in model order)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 4)), nn.Linear(4, 2)).eval()
    leaves = [name for name, m in net.named_modules() if next(m.children(), None) is None]
    assert leaves == ["0", "1.0", "1.1", "2"] == [name for name, _ in hookscope.select_modules(net)]
    x, x2 = torch.randn(2, 3), torch.randn(2, 3)
    with hookscope.capture(net) as cap, torch.no_grad():
        net(x)
    run = hookscope.extract(net, [x], out=tmp_path / "a.hookscope", progress=False)
    sweep = hookscope.patch_sweep(net, x, x2, target=lambda y: y[:, 0].sum(), select=None)
    found = hookscope.compare.divergence(net, net, x)
    assert list(cap) == list(run) == list(sweep.restored) == leaves
    assert [s.name for s in found.sites][:-1] == leaves  # the model's output last
