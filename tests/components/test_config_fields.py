"""How a StackConfig key is declared (components/config/config_fields.py): the live-change note refuses an effect the
reference cannot show, and ``key`` keeps the default, the factory and the metadata the generator reads."""

from __future__ import annotations

import dataclasses

import pytest

from ray_efa_eks.components.config import config_fields as cf


def test_live_takes_known_effects_in_order_with_a_note():
    note = cf.live("gpu-nodes", "gate", note="park first")
    assert note == cf.Live(("gpu-nodes", "gate"), "park first")
    assert (note.effects, note.note) == (("gpu-nodes", "gate"), "park first")
    assert cf.live("none").note == "" and cf.Live(("scale",)).note == ""
    for effect in cf.EFFECTS:
        assert cf.live(effect).effects == (effect,)


@pytest.mark.parametrize("effects", [(), ("gpu-node",), ("scale", "reboot"), ("Scale",)])
def test_live_refuses_an_unknown_or_missing_effect_naming_the_known_ones(effects):
    with pytest.raises(ValueError) as e:
        cf.Live(effects)
    assert str(e.value) == f"Live effects must be one or more of {', '.join(cf.EFFECTS)}; got {effects!r}"


def test_live_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        cf.live("scale").note = "x"


def test_every_effect_has_a_label_and_a_meaning():
    assert list(cf.EFFECTS)[:2] == ["gpu-nodes", "system-node"] and list(cf.EFFECTS)[-1] == "none"
    assert all(isinstance(label, str) and label and meaning for label, meaning in cf.EFFECTS.values())


def _declare():
    """Declared inside the test, not at import: a class body built at collection would not see a planted bug."""

    @dataclasses.dataclass
    class _Keys:
        required: int = cf.key()
        plain: int = cf.key(3, live=cf.live("scale"), allowed="1..9")
        listed: list = cf.key(factory=lambda: ["a"], live=cf.live("none"), allowed=("a", "b"))
        bare: str = cf.key("x")

    return _Keys


def test_key_keeps_the_default_the_factory_and_the_metadata():
    _Keys = _declare()
    f = {x.name: x for x in dataclasses.fields(_Keys)}
    assert f["plain"].default == 3 and f["plain"].default_factory is dataclasses.MISSING
    assert dict(f["plain"].metadata) == {"live": cf.Live(("scale",)), "allowed": "1..9"}
    assert f["listed"].default is dataclasses.MISSING and f["listed"].default_factory() == ["a"]
    assert dict(f["listed"].metadata) == {"live": cf.Live(("none",)), "allowed": ("a", "b")}
    assert dict(f["bare"].metadata) == {"live": None, "allowed": None}
    assert f["required"].default is dataclasses.MISSING and f["required"].default_factory is dataclasses.MISSING
    a, b = _Keys(required=1), _Keys(required=2)
    assert (a.plain, a.listed, a.bare, a.required) == (3, ["a"], "x", 1)
    assert a.listed is not b.listed  # a factory: each config gets its own list
    with pytest.raises(TypeError):
        _Keys()  # no default: the key is required
