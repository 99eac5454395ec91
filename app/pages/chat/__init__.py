"""The Chat page (:mod:`app.pages.chat.page`) and what it is made of: its controls, the
transcript and the reply being made (which imports no Qt), the figures line, and pictures
in a turn."""
