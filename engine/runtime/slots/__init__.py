"""Several sequences of one loaded model decoding together (continuous batching).

Each sequence (a *slot*) runs the ordinary decode loop (:mod:`engine.runtime.decode.loop`)
on the engine thread, in a greenlet its model's batcher resumes at its decodes, over a
:class:`~engine.runtime.decode.session.Session` whose
contexts are views of one sequence of the model's shared contexts
(:class:`~engine.runtime.slots.seqcontext.SeqContext`). A view's decode does not call
llama.cpp: it hands its rows to the :class:`~engine.runtime.slots.batcher.Batcher`, which
runs one decode of every waiting sequence's rows once every running sequence is waiting
— so each step is one target decode carrying every sequence's rows (verify rows under
MTP, a prompt chunk for one that just joined) and one MTP-context decode drafting for all
of them. Sequences join and leave between steps; sampling, grammars, penalties, stop
strings and statistics stay per sequence, exactly as when it runs alone.
"""
