"""Evidence by sessions: what one conversation of a quiet hour cannot do (contract
section 5c).

A bucket's hit rate is a ratio of tokens, and the tokens of one session are not
independent draws: an agent that rewrites its history on a Sunday morning can hold
79% of a small service's tokens for half an hour, and every one of its requests
misses together. Rollups cannot see that (they sum over sessions), so a drop the
series calls lasting is checked once more on its records, over its opening hours
(`OPENING_S`), with each session (or each request without one) as one unit:

* the drop must still reach `min_abs` without its biggest session: a fall that one
  conversation makes is that conversation's;
* the fall must be `z_score` standard errors of the hit rate estimated with sessions
  as clusters (the linearized variance of a ratio: each session's cached tokens
  minus the window's hit rate times its prompt tokens, squared and summed): sessions
  that disagree make it wide, sessions that all fell together (a routing or prompt
  break reaches every one of them) keep it narrow, however few they are.

A handful of requests is already refused by the series' own counts
(`service.detection.drops`); this is the check of their concentration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.detection.changepoints import DropRule

Floats = npt.NDArray[np.float64]

#: The opening of a drop's after side whose records are checked.
OPENING_S = 3 * 3600


@dataclass(frozen=True)
class SessionSums:
    """Prompt and cached tokens per session (or lone request) over a window."""

    prompt: Floats
    cached: Floats


def sessions_show_drop(sums: SessionSums, expected: float, rule: DropRule) -> bool:
    """Whether the sessions of a window show a hit rate below `expected` by the rule
    (see the module docstring)."""
    total = float(sums.prompt.sum())
    clusters = len(sums.prompt)
    if total <= 0 or clusters < 2:
        return False
    level = float(sums.cached.sum()) / total
    fall = expected - level
    biggest = int(np.argmax(sums.prompt))
    rest = total - float(sums.prompt[biggest])
    without = (float(sums.cached.sum()) - float(sums.cached[biggest])) / rest if rest > 0 else 0.0
    if fall < rule.min_abs or expected - without < rule.min_abs:
        return False
    deviations = sums.cached - level * sums.prompt
    variance = float((deviations * deviations).sum()) / total**2 * clusters / (clusters - 1)
    return fall >= rule.z_score * math.sqrt(variance)
