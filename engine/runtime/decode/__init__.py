"""The decode loop and its policy: the hot path of every generation.

``session`` knows exactly which tokens the target and MTP contexts hold (``entries``: the
MTP entry types they share); ``prefill`` brings a session to a prompt; ``loop`` runs a
generation over it, plain or speculative (propose → verify → settle), told by ``params``
and handing its output to ``emitter`` (``logprobs`` for each token); ``propose`` holds
the draft sources and ``accept`` the one acceptance rule for greedy, sample-and-compare
and rejection sampling; ``depth`` and the ``policy`` package choose how deep to draft
(auto included) and keep what auto learned; ``cache`` is the prompt cache's snapshots;
``sampling``, ``penalties``, ``grammar``, ``stopping`` and ``stats`` are the per-token
pieces. Engine thread only.
"""
