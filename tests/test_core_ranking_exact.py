"""The order's shortcuts give the answers of the plain computations they replace.

``Ranking`` re-sorts a level from an earlier order of it (``resort``: one
moved child put back in place, or an insertion sort, comparing with
``served_before`` instead of building key tuples), resumes ``best``'s scan of a level where it last found only inactive
children, keeps where two leaves' paths part (``may_preempt``) per tree, and
shares the base's sums and sorted levels until its first commitment. Each is
checked here against the plain version, on random trees, usages and
sequences of admissions.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest
from core_helpers import Sim
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.index.fair_share_order import Ranking, commitments, resort, served_before
from scheduler.policy.fair_share import less_used


def _key(use: dict[str, int], shares: dict[str, int], c: str) -> tuple[int, Fraction, int, str]:
    """The plain sort key: usage per share as an exact fraction."""
    s = shares[c]
    return (1, Fraction(0), 0, c) if s <= 0 else (0, Fraction(use[c], s), -s, c)


def _plain(r: Ranking, path: str) -> list[str]:
    return sorted(r.children[path], key=lambda c: _key(r.use, r.shares, c))


def _plain_best(r: Ranking) -> str | None:
    """``best`` as a fresh scan of freshly sorted levels."""
    p = r.tree.root
    if p is None or not r.active.get(p):
        return None
    while p in r.children:
        p = next(c for c in _plain(r, p) if r.active.get(c))
    return p


def _plain_leaves(r: Ranking, node: str) -> list[str]:
    """Every leaf under ``node`` depth first, each level freshly sorted."""
    if node not in r.children:
        return [node]
    return [leaf for c in _plain(r, node) for leaf in _plain_leaves(r, c)]


def parting_of(leaf: str, victim: str) -> tuple[str, str] | None:
    """The siblings where the two paths part (the nodes compared), or None when one holds the other."""
    a, b = leaf.split("/"), victim.split("/")
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if i == min(len(a), len(b)):
        return None
    return "/".join(a[: i + 1]), "/".join(b[: i + 1])


def plain_may_preempt(r: Ranking, leaf: str, commitment: int, victim: str) -> bool:
    parting = parting_of(leaf, victim)
    if parting is None:
        return False
    x, y = parting
    return less_used(r.use[x], r.shares[x], r.use[y], r.shares[y], commitment)


# Siblings: (share, usage); ratios collide often (small numbers, shared factors).
SIBLINGS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), min_size=1, max_size=12)


@settings(max_examples=400, deadline=None)
@given(siblings=SIBLINGS, seed=st.integers(0, 2**32), moved=st.integers(-12, 12))
def test_a_stale_level_resorts_to_the_sorted_order(siblings: list[tuple[int, int]], seed: int,
                                                   moved: int) -> None:
    """From any old order, or from the sorted order before one child's sum moved either way."""
    names = [f"n{i:02d}" for i in range(len(siblings))]
    shares = {n: s for n, (s, _) in zip(names, siblings, strict=True)}
    use = {n: u * 3600 for n, (_, u) in zip(names, siblings, strict=True)}
    rnd = random.Random(seed)
    hint = list(names)
    rnd.shuffle(hint)
    assert resort((hint, ""), use, shares) == sorted(names, key=lambda c: _key(use, shares, c))
    for a in names:
        for b in names:
            assert served_before(a, b, use, shares) is (_key(use, shares, a) < _key(use, shares, b))
    before = sorted(names, key=lambda c: _key(use, shares, c))
    child = rnd.choice(names)
    use[child] = max(0, use[child] + moved * 1800)
    assert resort((before, child), use, shares) == sorted(names, key=lambda c: _key(use, shares, c))


def _random_tree(rnd: random.Random) -> tuple[list[tuple[str, int, tuple[str, ...]]], list[str]]:
    tree: list[tuple[str, int, tuple[str, ...]]] = [("lab", 1, ("admin",))]
    leaves = []
    for p in range(rnd.randint(1, 4)):
        tree.append((f"lab/p{p}", rnd.randint(0, 3), ()))
        for q in range(rnd.randint(1, 5)):
            leaf = f"lab/p{p}/q{q}"
            tree.append((leaf, rnd.randint(0, 4), ()))
            leaves.append(leaf)
    if rnd.random() < 0.5:  # a leaf beside inner nodes: a level that is not all leaves
        tree.append(("lab/solo", rnd.randint(0, 3), ()))
        leaves.append("lab/solo")
    return tree, leaves


def with_history(seed: int) -> tuple[Sim, list[str], random.Random]:
    rnd = random.Random(seed)
    tree, leaves = _random_tree(rnd)
    s = Sim(tuple(tree), hosts=1)
    for leaf in leaves:
        if rnd.random() < 0.6:
            s.run_history(leaf, rnd.choice([1, 2, 4, 8]), rnd.choice([60, 600, 1200, 3600]))
    return s, leaves, rnd


@pytest.mark.parametrize("seed", range(40))
def test_best_and_the_order_follow_admissions_exactly(seed: int) -> None:
    """``best`` and the walks, after any mix of activations, commitments and deactivations, are the plain ones."""
    s, leaves, rnd = with_history(seed)
    state = s.state
    r = Ranking(state, commitments(state))
    r.activate([leaf for leaf in leaves if rnd.random() < 0.7] + ["lab/gone"])
    counts = dict(r.active)  # as a cycle keeps them for the next one
    steps = 0
    while steps < 200:
        steps += 1
        expected = _plain_best(r)
        assert r.best() == expected
        if steps % 7 == 1:
            plain = _plain_leaves(r, "lab")
            assert r.leaf_order() == plain
            wanted = set(rnd.sample(leaves, rnd.randint(0, len(leaves))))
            assert list(r.iter_leaves_in(wanted)) == [leaf for leaf in plain if leaf in wanted]
        for p in r.children:
            assert r.sorted_children(p) == _plain(r, p)
        if expected is None:
            if rnd.random() < 0.5:
                break
            r.activate(rnd.sample(leaves, rnd.randint(1, len(leaves))))
            continue
        roll = rnd.random()
        if roll < 0.45:
            r.commit(rnd.choice([expected, rnd.choice(leaves)]), rnd.choice([0, 1, 60, 3600, 28800]))
        elif roll < 0.9:
            r.deactivate(expected)
        elif roll < 0.95:
            r.activate([rnd.choice(leaves)])
        else:
            r.active = dict(counts)  # as a cycle hands it kept counts
    assert steps > 1


@pytest.mark.parametrize("seed", range(20))
def test_may_preempt_is_the_plain_comparison(seed: int) -> None:
    s, leaves, rnd = with_history(seed)
    state = s.state
    r = Ranking(state, commitments(state))
    for _ in range(3):
        for a in leaves:
            for b in leaves:
                c = rnd.choice([0, 1, 3600, 10**6])
                assert r.may_preempt(a, c, b) is plain_may_preempt(r, a, c, b)
        r.commit(rnd.choice(leaves), rnd.randint(1, 10**5))
    # A later order of the same tree reuses the memo of where paths part.
    again = Ranking(state, commitments(state))
    assert again._splits is r._splits
    for a in leaves:
        for b in leaves:
            assert again.may_preempt(a, 7, b) is plain_may_preempt(again, a, 7, b)


@pytest.mark.parametrize("seed", range(20))
def test_an_order_that_commits_leaves_the_base_as_it_was(seed: int) -> None:
    """Sums and sorted levels are the base's until the first commitment, then the order's own."""
    s, leaves, rnd = with_history(seed)
    state = s.state
    first = Ranking(state, commitments(state))
    first.leaf_order()  # sorts every level into the base
    use = dict(first.use)
    levels = {p: list(first.sorted_children(p)) for p in first.children}
    for _ in range(5):
        first.commit(rnd.choice(leaves), rnd.randint(1, 10**5))
        first.leaf_order()
    second = Ranking(state, commitments(state))
    assert second.use == use
    assert {p: second.sorted_children(p) for p in second.children} == levels
    assert second.use != first.use


def test_ratios_a_float_cannot_tell_apart_are_ordered_exactly() -> None:
    """Two usages per share that are one apart in 2**60 compare as the integers say."""
    big = 2**60
    use = {"a": big + 1, "b": big}
    shares = {"a": 3, "b": 3}
    assert (big + 1) / 3 == big / 3  # the float quotients are equal
    assert not served_before("a", "b", use, shares) and served_before("b", "a", use, shares)
