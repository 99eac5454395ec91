"""Every tuned constant of what a round drafts, in one place, each with where it came from.

The planner (:mod:`engine.runtime.decode.policy.planner`), auto's depth
(:mod:`~engine.runtime.decode.policy.adaptive`), its costs
(:mod:`~engine.runtime.decode.policy.costs`) and the depth of steps of several sequences
(:mod:`~engine.runtime.decode.policy.steps`) read these and define none of their own. The
figures are this project's measurements on the bundled demo model and the 200 MB bench
models (2-core EPYC build machine; docs/mtp.md, docs/parallel.md, docs/agent-speed.md),
unless a line says it is a choice.
"""

from __future__ import annotations

# ---------------------------------------------------------------- costs (policy.costs)
#: samples per cost window: its median ignores up to 4 outliers (this machine deschedules
#: ~10% of sub-millisecond rounds, each 2-10x the typical one: test_adaptive_traces' noise)
WINDOW = 9
#: samples per window of rounds right after a change of depth (rarer: ~1 in 16 rounds)
TRANSITION_WINDOW = 5
#: steady samples before a depth is judged by its own wall time (3 of 9: a median of
#: fewer moved by one descheduled round in the recorded demo trace)
MIN_STEADY = 3
#: extra cost per verify row (x a one-row verify) assumed before any is measured: the demo's
#: verify of 2-5 rows costs ~1.1-1.6x one row (data/demo_round_costs.json)
DEFAULT_SLOPE = 0.15

# ------------------------------------------------------- acceptance (policy.adaptive)
#: optimistic prior acceptance of the first draft position, so a new head gets tried (the
#: demo's head: 0.89, 0.74, 0.72 by position) ...
PRIOR_P = 0.8
#: ... worth this many observations, fading while a position is reached (a prior that kept
#: its weight held every estimate above ~3%: a head never accepted drafted on forever where
#: a draft costs less than that) ...
PRIOR_N = 1.0
#: ... a deeper position's prior is the one before it times this (the demo: 0.89, 0.74,
#: 0.72; assuming no fall-off, a fresh session spent its first rounds on depths that lose)
DEEPER = 0.85
#: ... down to this, recovering like the counts decay while a position is not reached
PRIOR_FLOOR = 0.02
#: per drafting round (~100 rounds of memory: at ~50 a run of rejections switched a head
#: ~5% above break-even off within a few hundred rounds, and p = 0.6 and p = 0.45 were too
#: close to tell apart)
DECAY = 0.99
#: per probe while drafting is off (~5 probes) ...
PROBE_DECAY = 0.8
#: ... and the evidence that turned drafting off is cut to this many observations
OFF_EVIDENCE = 5.0
#: tokens between probes while drafting is off: doubled by a failed probe, halved by an
#: accepted one (a head that never helps costs well under 1%: test_adaptive)
PROBE_MIN, PROBE_MAX = 16, 256

# ---------------------------------------------------- choosing a depth (policy.adaptive)
#: a measured depth must beat the current one by this much ...
MIN_GAIN = 0.005
#: ... and by this many standard errors of the difference (timing and acceptance)
NOISE_SIGMAS = 1.5
#: drafting rounds between tries of a neighbouring depth: doubling while tries confirm the
#: choice (under 1% of rounds spent on tries once settled: test_adaptive_traces)
EXPLORE_MIN, EXPLORE_MAX = 16, 1024
#: a try: the transition, then steady rounds to judge it
EXPLORE_ROUNDS = 1 + MIN_STEADY + 1
#: a deeper neighbour estimated this far below the current depth is not tried (a fresh
#: session spent a quarter of its first rounds on deeper depths its estimates ruled out)
EXPLORE_SKIP = 0.1
#: ... a shallower one (measured) only this far below (on the demo, where depth 1 earns
#: ~45% more than plain, a fresh session's plain tries cost ~4% of its first 1,000 tokens)
EXPLORE_SKIP_SHALLOW = 0.25
#: drafting rounds at depth 1 before a fresh policy goes deeper (at near-zero acceptance a
#: deeper first round only costs more)
FIRST_ROUNDS = 4.0
#: steady rounds after which a depth's wall times are too old to switch on (this machine
#: changes speed by 1.6x between stretches)
STALE = 32
#: drafting rounds between choices (a choice costs ~40 us of Python; choosing less often
#: while choices confirmed the depth was slower to leave a losing depth: 0.91x the best
#: fixed depth on one recorded-cost seed)
CHOOSE_EVERY = 4

# ------------------------------------------------ steps of several sequences (policy.steps)
#: a sequence sits a step's drafting out when the step's goodput gains this much by it
SIT_OUT_MARGIN = 0.03
#: steps sat out between its drafts (doubling while the verdict stands)
SIT_OUT_PROBE_MIN, SIT_OUT_PROBE_MAX = 8, 128
#: per own drafting round: a sequence's text changes faster than a model's mix (a choice)
OWN_DECAY = 0.95
#: the step's acceptance is worth this many of a sequence's own rounds at first (a choice)
OWN_PRIOR_N = 4.0

# ------------------------------------------------------- suffix drafts (policy.planner)
#: most tokens one suffix draft proposes (the verify's logit rows cut it further:
#: engine.gguf.memory.logit_rows; 64 rows fit in 32 MiB per sequence up to a 131k vocabulary)
MAX_DRAFT = 64
#: acceptance prior per token of a suffix draft, by match length (16 or 8, 4, 3 tokens: a
#: long match is likely to go on; a choice, corrected within a few rounds by what is kept) ...
SUFFIX_PRIORS = (0.9, 0.7, 0.5)
#: ... worth this many observations ...
SUFFIX_PRIOR_N = 2.0
#: ... and the decay of observations per round (~30 rounds of memory: a conversation's
#: copying comes and goes faster than a head's quality)
SUFFIX_DECAY = 0.97
#: the MTP chain's acceptance prior at a fixed depth (which keeps no estimates by position;
#: the demo's head: 0.89, 0.74, 0.72)
FIXED_MTP_PRIOR = 0.7
