"""The fair-share comparison, written once: is one side less used per share than another?

Every part of the policy that compares two budget subtrees by usage against
entitlement (the cycle's order, the ranking, the rules, the explanation) asks
this one function, in exact integers, so the answers never disagree by a
rounding.
"""

from __future__ import annotations


def less_used(use_x: int, share_x: int, use_y: int, share_y: int, commitment: int) -> bool:
    """Is side x, with ``commitment`` added, strictly less used per share than side y?

    Exact, in integers: ``(use_x + commitment) / share_x < use_y / share_y``. A side
    with no share is never less used (it is served last); against a side with no
    share any side with a share is.
    """
    if share_x <= 0:
        return False
    if share_y <= 0:
        return True
    return (use_x + commitment) * share_y < use_y * share_x
