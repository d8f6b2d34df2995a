"""The champion and the challenger compared as paired predictions on the same held-out
images: McNemar's exact test on the images where they disagree.

Only the discordant images carry evidence of a difference: `b` the challenger gets right
and the champion wrong, `c` the reverse (`a` both right, `d` both wrong). Given the
`n = b + c` discordant images, `c` is binomial with the probability `theta` that a
disagreement goes the champion's way.

- **Better** (`vertex.promotion: default`): equal models give `theta = 0.5`; the
  challenger is better when `P(X <= c | n, 0.5)` (one-sided) is at most the level.
- **Unless shown worse than a margin** (`unless_shown_worse`): the challenger may make at most
  `1 + margin` times the champion's errors, `c + d <= (1 + margin)(b + d)`; given `n` and
  `d` the boundary is `theta0 = (1 + margin + margin * d / n) / (2 + margin)`. It is kept
  out only when it is significantly worse than that: `P(X >= c | n, theta0)` at most the
  level. A schedule then keeps the model current on fresh data unless the evidence says
  the new one is worse than the margin allows.

Exact binomial tails (no normal approximation: the held-out splits are small), their
binomial coefficients computed in logarithms.
"""

from __future__ import annotations

import dataclasses
import functools
import math


@dataclasses.dataclass(frozen=True)
class Paired:
    """The four counts of two models' correctness on the same images.

    Attributes:
        both_right: a.
        challenger_only: b, the challenger right, the champion wrong.
        champion_only: c, the champion right, the challenger wrong.
        both_wrong: d.
    """

    both_right: int
    challenger_only: int
    champion_only: int
    both_wrong: int

    @property
    def images(self) -> int:
        return self.both_right + self.challenger_only + self.champion_only + self.both_wrong

    @property
    def discordant(self) -> int:
        return self.challenger_only + self.champion_only

    def words(self) -> str:
        """The counts in words, for the decision."""
        return (f"{self.images} paired images: the challenger alone right on "
                f"{self.challenger_only}, the champion alone on {self.champion_only}, both "
                f"wrong on {self.both_wrong}")


def pair(challenger: str, champion: str) -> Paired:
    """The counts from each model's correctness per image ("1" right, "0" wrong, in the
    held-out split's file order).

    Raises:
        ValueError: The two are not of the same images (lengths differ).
    """
    if len(challenger) != len(champion):
        raise ValueError(f"the challenger was scored on {len(challenger)} images and the "
                         f"champion on {len(champion)}: not the same images")
    counts = {(x, y): 0 for x in "01" for y in "01"}
    for mine, theirs in zip(challenger, champion, strict=True):
        counts[(mine, theirs)] += 1
    return Paired(counts[("1", "1")], counts[("1", "0")], counts[("0", "1")],
                  counts[("0", "0")])


def _pmf(i: int, n: int, p: float) -> float:
    # In logarithms: math.comb(n, i) passes a float's range from n of about 1,030 on.
    if p <= 0.0 or p >= 1.0:
        return float(i == (n if p >= 1.0 else 0))
    return math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                    + i * math.log(p) + (n - i) * math.log1p(-p))


def lower_tail(k: int, n: int, p: float) -> float:
    """P(X <= k) for X binomial(n, p)."""
    return min(1.0, sum(_pmf(i, n, p) for i in range(k + 1)))


def upper_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X binomial(n, p)."""
    return min(1.0, sum(_pmf(i, n, p) for i in range(k, n + 1)))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A paired test's outcome: whether the challenger passes, the p-value, and the rule
    in words."""

    passes: bool
    p_value: float
    rule: str


def better(paired: Paired, level: float) -> Verdict:
    """Whether the challenger is significantly better (McNemar's exact test, one-sided)."""
    p = lower_tail(paired.champion_only, paired.discordant, 0.5)
    return Verdict(p <= level, p, f"McNemar's exact test, one-sided, that the challenger "
                                  f"is better: p = {p:.4f} at level {level:g}")


def boundary(paired: Paired, margin: float) -> float:
    """`theta0`: the share of the disagreements the champion may win at the margin."""
    n = paired.discordant
    return (1 + margin + margin * paired.both_wrong / n) / (2 + margin) if n else 0.5


def not_worse(paired: Paired, level: float, margin: float) -> Verdict:
    """Whether the challenger is not shown worse than `margin` allows (it passes unless
    McNemar's exact test against the margin's boundary rejects it, one-sided)."""
    theta = boundary(paired, margin)
    p = upper_tail(paired.champion_only, paired.discordant, theta)
    return Verdict(p > level, p, f"McNemar's exact test, one-sided, that the challenger "
                                 f"makes more than {1 + margin:g} times the champion's "
                                 f"errors: p = {p:.4f} at level {level:g}")


#: The power a split must have to tell a difference (the usual 80%).
POWER = 0.8


@functools.lru_cache(maxsize=4096)
def _critical(n: int, level: float) -> int:
    """The most disagreements the champion may win for the default test to find the
    challenger better (-1 when none would do): the lower tail summed once, term by term."""
    total, k = 0.0, -1
    for i in range(n + 1):
        total += _pmf(i, n, 0.5)
        if total > level:
            break
        k = i
    return k


def power(n: int, errors: float, relative: float, level: float) -> float:
    """The chance the default test finds a challenger that makes `relative` fewer errors
    than the champion's `errors`, the two disagreeing on `n` images.

    With the champion's errors and the disagreements as measured, a challenger with
    `(1 - relative)` times the errors wins `relative * errors` more of the `n`
    disagreements than it loses: a disagreement goes the champion's way with
    `theta = 1/2 - relative * errors / (2n)`, and the test finds it when the champion wins
    at most the critical count (`_critical`)."""
    if n == 0:
        return 0.0
    theta = max(0.0, 0.5 - relative * errors / (2 * n))
    return lower_tail(_critical(n, level), n, theta)


def detectable(paired: Paired, level: float, target: float = POWER) -> float | None:
    """The smallest relative difference in errors (0.01 steps) the default test finds with
    `target` power on these images (their disagreements and the champion's errors as
    measured); None when no difference would be found (no disagreement, or too few)."""
    errors = paired.challenger_only + paired.both_wrong  # the champion's
    for hundredths in range(1, 101):
        if power(paired.discordant, errors, hundredths / 100, level) >= target:
            return hundredths / 100
    return None


def images_for(paired: Paired, relative: float, level: float, target: float = POWER
               ) -> int | None:
    """About how many held-out images would find `relative` with `target` power, the
    disagreements and the champion's errors growing with the split as on these images;
    None without a disagreement and an error to scale from."""
    errors = paired.challenger_only + paired.both_wrong
    if not paired.discordant or not errors or not paired.images:
        return None

    def found(images: int) -> bool:
        scale = images / paired.images
        return power(round(paired.discordant * scale), errors * scale, relative,
                     level) >= target

    low, high = paired.images, paired.images
    while not found(high):
        low, high = high, high * 2
        if high > 10**6:  # past a million held-out images: say none would do
            return None
    while high - low > max(1, low // 100):  # the fewest images with that power, to 1%
        middle = (low + high) // 2
        if found(middle):
            high = middle
        else:
            low = middle
    return high
