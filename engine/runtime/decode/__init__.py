"""The decode loop and its policy: the hot path of every generation.

``session`` knows exactly which tokens the target and MTP contexts hold; ``loop`` runs a
generation over a session, plain or speculative (propose → verify → settle);
``propose`` holds the draft sources and ``accept`` the one acceptance rule for greedy,
sample-and-compare and rejection sampling; ``depth``/``policy``/``adaptive`` choose how
deep to draft and ``policystore`` keeps what auto learned; ``sampling``, ``stopping``
and ``stats`` are the per-token pieces. Engine thread only.
"""
