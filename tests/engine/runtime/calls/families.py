"""What the call-format contract (test_contract.py) needs to know of one format: a
:class:`Family` of data — its real templates, the replies its models write, malformed and
cut ones, and how a call it is forced to write opens and closes. The data of each format
is in families_json.py, families_param.py and families_minimax.py (as the formats are in
jsoncalls/ and paramcalls/). Also the tool the grammar tests force, and the check of a
reply's every prefix that the contract and harmony's own tests make."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.runtime.prompt.calls.base import ToolFormat
from engine.runtime.prompt.tools import Tool, parse_tools

#: a call as the tests expect it: its name and its arguments, an object, or (where the
#: reply breaks off inside them) their JSON text as far as it was written
Call = tuple[str, dict | str]


@dataclass(frozen=True)
class Reply:
    """A reply and what it splits into."""

    text: str
    content: str
    calls: list[Call]
    #: arguments stream as they are written (False where they are a JSON string, or come
    #: before the call's name: sent whole)
    grows: bool = True


def content_only(*texts: str) -> list[Reply]:
    """Replies that hold no call: each is content, every character of it."""
    return [Reply(text, text, []) for text in texts]


@dataclass(frozen=True)
class Family:
    """One call format's contract data."""

    fmt: ToolFormat
    #: every real template that writes this format, and the text that follows the calls in a
    #: conversation it renders (where the parser stops reading them)
    templates: dict[str, str]
    #: those of them whose description of the tools shows the calls' opener (before the
    #: conversation, where the parser must not take it for the calls)
    shown_in_prompt: tuple[str, ...]
    #: the tools offered, the calls a conversation holds, and the conversation (from calls)
    tools: tuple[Tool, ...]
    calls: list[tuple[str, dict]]
    conversation: Callable[[list[tuple[str, dict]]], list[dict]]
    #: replies as the models write them: they split into content and calls whole and streamed
    replies: list[Reply]
    #: malformed replies: nothing lost, the calls that are whole and the rest as content
    malformed: list[Reply]
    #: replies that break off inside a call's arguments: the call as far as it was written
    cut: list[Reply]
    #: how a call forced by the grammar (tools :data:`PICK`) begins and ends
    opens: str
    closes: str
    #: a marker (or a part of several) that a model's vocabulary may hold as a control token
    control: str


def partials_only_grow(fmt: ToolFormat, text: str, tools: tuple[Tool, ...]) -> list:
    """``fmt.partial`` on every prefix of ``text`` (from its calls' start): what was sent of
    a call's arguments is never taken back, and a call is done only with its final
    arguments. Returns the calls of the whole text."""
    sent: dict[int, str] = {}
    final = fmt.partial(text, tools)[0]
    for k in range(len(text) + 1):
        for i, call in enumerate(fmt.partial(text[:k], tools)[0]):
            assert call.args.startswith(sent.get(i, "")), (k, call)
            assert not call.done or call == final[i], (k, call)
            sent[i] = call.args
    return final


#: one tool with a bounded schema, for the grammar: an enum, a bounded integer, a short string
PICK = parse_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "pick",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "mode": {"type": "string", "enum": ["fast", "slow"]},
                        "n": {"type": "integer", "minimum": 0, "maximum": 9},
                        "note": {"type": "string", "maxLength": 12},
                    },
                    "required": ["mode", "n"],
                },
            },
        }
    ]
)
