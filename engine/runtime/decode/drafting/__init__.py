"""Where a round's drafts come from: the sources only propose — the MTP head's chain
(:mod:`.propose`), what followed the conversation's earlier match (:mod:`.suffix`) — and
:mod:`.drafts` runs a round's plan with them. What a round drafts is decided by the round
planner (:mod:`engine.runtime.decode.policy.planner`)."""
