"""The default tier's sample of a grid (tests/conftest.py `sampled`): it covers every value of
every parameter when it can, and spreads over the grid when it cannot."""

import itertools
from dataclasses import dataclass
from types import SimpleNamespace

from conftest import sampled


def grid(**axes) -> list[SimpleNamespace]:
    names = list(axes)
    return [
        SimpleNamespace(callspec=SimpleNamespace(params=dict(zip(names, values, strict=True))))
        for values in itertools.product(*axes.values())
    ]


def covered(cases) -> set[tuple[str, object]]:
    return {(k, v) for c in cases for k, v in c.callspec.params.items()}


def test_a_sample_as_large_as_the_longest_axis_covers_every_value():
    cases = grid(n=[1, 2, 17, 100, 257], causal=[False, True], masked=[False, True])
    chosen = sampled(cases, 5)
    assert len(chosen) == len(set(map(id, chosen))) == 5
    assert covered(chosen) == covered(cases)
    assert len(sampled(cases, 4)) == 4 and covered(sampled(cases, 4)) != covered(cases)


def test_a_sample_of_dataclass_cases_covers_their_fields():
    @dataclass(frozen=True)
    class Case:
        op: str
        n: int

    cases = [
        SimpleNamespace(callspec=SimpleNamespace(params={"case": Case(op, n)}))
        for op, n in itertools.product(["a", "b", "c"], [1, 64, 257])
    ]
    ops_and_lengths = {(c.callspec.params["case"].op, c.callspec.params["case"].n) for c in cases}
    chosen = [c.callspec.params["case"] for c in sampled(cases, 3)]
    assert {c.op for c in chosen} == {"a", "b", "c"} and {c.n for c in chosen} == {1, 64, 257}
    assert len(ops_and_lengths) == 9


def test_a_sample_larger_than_the_grid_is_the_grid():
    cases = grid(x=[1, 2], y=["p", "q"])
    assert sorted(map(id, sampled(cases, 10))) == sorted(map(id, cases))
