"""The generated bad-input suite (harness: tests/bad_input.py): every public callable, every argument, fed values of
each kind that has ever gone wrong; no cryptic error, no silently accepted bad value, no hang, and the unusual but
valid inputs keep working."""

from __future__ import annotations

import collections

import pytest

import bad_input

CALLABLES = bad_input.probed_callables()


def _module_of(name: str) -> str:
    """The module that defines a callable (posbook.X is re-exported from its module; methods go with their class)."""
    parts = name.split(".")
    if parts[1] in ("experiments", "theory"):
        return ".".join(parts[:3])
    return getattr(bad_input.pb, parts[1]).__module__


# One test per module, so that pytest-xdist spreads them and a failure names where to look.
GROUPS = collections.defaultdict(list)
for _name in CALLABLES:
    GROUPS[_module_of(_name)].append(_name)


def test_every_public_callable_has_a_specimen():
    missing = sorted(set(CALLABLES) - set(bad_input.SPECIMENS))
    stale = sorted(set(bad_input.SPECIMENS) - set(CALLABLES))
    assert not missing, f"public callables without a valid call in tests/bad_input.py SPECIMENS: {missing}"
    assert not stale, f"SPECIMENS entries for names that are no longer public: {stale}"


@pytest.mark.parametrize("module", sorted(GROUPS))
def test_bad_input_gets_a_clear_error(module):
    outcomes = bad_input.probe_all(GROUPS[module])
    failing = [o.line() for o in outcomes if o.outcome in bad_input.FAILING]
    vague = [o.line() for o in outcomes if o.outcome == "vague"]
    counts = collections.Counter(o.outcome for o in outcomes)
    print(f"{module}: {dict(counts)}")
    assert not failing, f"{len(failing)} of {len(outcomes)} inputs:\n" + "\n".join(failing)
    assert not vague, f"{len(vague)} errors that do not name the argument:\n" + "\n".join(vague)


def test_the_unchecked_layer_says_so():
    """A public callable left out of the probes is one of the unchecked layer: it is public, its docstring says it
    is unchecked, and the harness names the checked caller that stands before it."""
    public = bad_input.public_callables()
    for name, caller in bad_input.UNCHECKED.items():
        assert name in public, f"{name} is listed as unchecked but is not public"
        assert "unchecked" in (public[name].__doc__ or ""), f"{name}'s docstring does not say it is unchecked"
        assert caller, name
