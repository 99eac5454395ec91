"""The contract data of MiniMax's formats (engine/runtime/prompt/calls/paramcalls/minimax.py):
M2's ``<minimax:tool_call><invoke name=…><parameter name=…>V</parameter></invoke>``, M3's
``]<]minimax[>[``-marked elements (a nested value spelled out as elements) and M1's JSON
lines in ``<tool_calls>``."""

from __future__ import annotations

import copy

from engine.runtime.prompt.calls.paramcalls.minimax import MINIMAX, MINIMAX_M1, MINIMAX_M3, NS
from engine.runtime.prompt.tools import parse_tools
from tests.callharness import TRIP_SCHEMAS, trip_conversation
from tests.engine.runtime.calls.families import Family, Reply, content_only
from tests.engine.runtime.calls.families_param import CUT_CITY, TWO_CALLS


def _with_tags(schemas: list[dict]) -> list[dict]:
    """The trip tools with a list of strings added to the weather's (M3 spells a list out as
    elements)."""
    out = copy.deepcopy(schemas)
    out[0]["function"]["parameters"]["properties"]["tags"] = {"type": "array", "items": {"type": "string"}}
    return out


TOOLS = parse_tools(_with_tags(TRIP_SCHEMAS))
CALLS = [
    ("get_weather", {"city": "San Francisco", "days": 3}),
    (
        "plan_trip",
        {
            "stops": [{"city": "Rome", "nights": 2, "open": True}, {"city": "Oslo"}],
            "options": {"by": "train", "avoid": ["tolls", "ferries"]},
        },
    ),
]
LINES = [("get_weather", {"city": "Zürich", "days": 10, "tags": ["sun", "3"]})]
NO_ARGUMENTS = [("plan_trip", {})]

# ------------------------------------------------------------------------------ M2
M2_TWO = (
    'Let me check.\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">São '
    'Paulo "Centro"\nzona 1 ☀</parameter>\n<parameter name="days">3</parameter>\n<parameter name="unit">'
    'celsius</parameter>\n</invoke>\n<invoke name="plan_trip">\n<parameter name="stops">[{"city": '
    '"Rome", "nights": 2}, {"city": "Oslo"}]</parameter>\n<parameter name="options">{"by": "train", '
    '"budget": {"max": 900}}</parameter>\n</invoke>\n</minimax:tool_call>'
)
M2_WRONG = M2_TWO.replace("</invoke>", "</invok>", 1)
M2_FAMILY = Family(
    MINIMAX,
    templates={"MiniMax-M2.jinja": "[e~["},  # the block is read to its end
    shown_in_prompt=("MiniMax-M2.jinja",),
    tools=TOOLS,
    calls=CALLS,
    conversation=trip_conversation,
    replies=[
        Reply(M2_TWO, "Let me check.", TWO_CALLS),
        # values on lines of their own (trimmed, as MiniMax's parser trims them); no whitespace between tags
        Reply(
            '<minimax:tool_call><invoke name="get_weather"><parameter name="city">\nZürich\n</parameter>'
            '<parameter name="days">\n10\n</parameter><parameter name="tags">["sun", "3"]</parameter></invoke>'
            "</minimax:tool_call>",
            "",
            LINES,
        ),
        Reply('<minimax:tool_call>\n<invoke name="plan_trip">\n</invoke>\n</minimax:tool_call>', "", NO_ARGUMENTS),
    ],
    malformed=[
        # cut inside the second call's name: the first call, then the rest as content
        Reply(M2_TWO[: M2_TWO.index("plan_trip") + 4], 'Let me check.<invoke name="plan', TWO_CALLS[:1]),
        # a wrong closing marker: the call closes there, the rest is content
        Reply(M2_WRONG, "Let me check." + M2_WRONG[M2_WRONG.index("</invok>") :], TWO_CALLS[:1]),
        # garbage after the opener, Hermes JSON in the block, a name with nothing of a call after
        # it, an invoke with no name: content
        *content_only(
            "Hmm. <minimax:tool_call> this is not a call",
            '<minimax:tool_call>\n{"name": "get_weather", "arguments": {}}\n</minimax:tool_call>',
            '<minimax:tool_call>\n<invoke name="get_weather">Sure, the weather.',
            "<minimax:tool_call>\n<invoke>\n</invoke>\n</minimax:tool_call>",
        ),
    ],
    # the value as far as it was written, trimmed
    cut=[Reply(M2_TWO[: M2_TWO.index("zona")], "Let me check.", [("get_weather", CUT_CITY.removesuffix("\\n"))])],
    opens='<minimax:tool_call>\n<invoke name="pick">',
    closes="</minimax:tool_call>",
    control="</parameter>",
)

# ------------------------------------------------------------------------------ M3
M3_TWO = (
    f'Let me check.{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>São Paulo "Centro"\n'
    f"zona 1 ☀{NS}</city>{NS}<days>3{NS}</days>{NS}<unit>celsius{NS}</unit>{NS}</invoke>\n"
    f'{NS}<invoke name="plan_trip">{NS}<stops>{NS}<item>{NS}<city>Rome{NS}</city>{NS}<nights>2'
    f"{NS}</nights>{NS}</item>{NS}<item>{NS}<city>Oslo{NS}</city>{NS}</item>{NS}</stops>{NS}<options>"
    f"{NS}<by>train{NS}</by>{NS}<budget>{NS}<max>900{NS}</max>{NS}</budget>{NS}</options>"
    f"{NS}</invoke>\n{NS}</tool_call>"
)
M3_WRONG_TAG = M3_TWO.replace(f"{NS}</item>", f"{NS}</itm>", 1)
M3_ODD = M3_TWO.replace(f'Centro"\nzona 1 ☀{NS}</city>', f'Centro"{NS}<b>x{NS}</b>{NS}</city>', 1)
M3_FAMILY = Family(
    MINIMAX_M3,
    templates={"MiniMax-M3.jinja": "[e~["},
    shown_in_prompt=("MiniMax-M3.jinja",),
    tools=TOOLS,
    calls=CALLS,
    conversation=trip_conversation,
    replies=[
        Reply(M3_TWO, "Let me check.", TWO_CALLS),
        # a list of strings (typed by the items' schema), newlines between the elements
        Reply(
            f'{NS}<tool_call>\n{NS}<invoke name="get_weather">\n{NS}<city>Zürich{NS}</city>\n{NS}<days>10'
            f"{NS}</days>\n{NS}<tags>\n{NS}<item>sun{NS}</item>\n{NS}<item>3{NS}</item>\n{NS}</tags>\n{NS}</invoke>\n"
            f"{NS}</tool_call>",
            "",
            LINES,
        ),
        Reply(f'{NS}<tool_call>\n{NS}<invoke name="plan_trip">{NS}</invoke>\n{NS}</tool_call>', "", NO_ARGUMENTS),
    ],
    malformed=[
        # a nested value closed by another element's tag: the call closes before it, the rest is content
        Reply(
            M3_WRONG_TAG,
            "Let me check." + M3_WRONG_TAG[M3_WRONG_TAG.index(f"{NS}<stops>") :],
            [TWO_CALLS[0], ("plan_trip", {})],
        ),
        # a string followed by a marker that is not its end: the string ends there
        Reply(
            M3_ODD,
            "Let me check." + M3_ODD[M3_ODD.index(f"{NS}<b>") :],
            [("get_weather", {"city": 'São Paulo "Centro"'})],
        ),
        # garbage after the opener, M2's syntax under M3's opener, a name with nothing of a call after it: content
        *content_only(
            f"Hmm. {NS}<tool_call> this is not a call",
            f'{NS}<tool_call>\n<invoke name="get_weather">\n</invoke>',
            f'{NS}<tool_call>\n{NS}<invoke name="get_weather">Sure, the weather.',
        ),
    ],
    cut=[
        # cut inside a nested value: the call is delivered with the arguments before it
        Reply(M3_TWO[: M3_TWO.index("Oslo")], "Let me check.", [TWO_CALLS[0], ("plan_trip", "{")]),
        # cut inside a string: as far as it was written, a marker's beginning held back
        Reply(
            M3_TWO[: M3_TWO.index("zona") + 6] + NS[:4],
            "Let me check.",
            [("get_weather", '{"city": "São Paulo \\"Centro\\"\\nzona 1')],
        ),
    ],
    opens=f'{NS}<tool_call>\n{NS}<invoke name="pick">',
    closes=f"{NS}</tool_call>",
    control=NS,
)

# ------------------------------------------------------------------------------ M1
M1_FAMILY = Family(
    MINIMAX_M1,
    templates={"MiniMax-M1.jinja": "<end_of_sentence>"},
    shown_in_prompt=("MiniMax-M1.jinja",),
    tools=TOOLS,
    calls=CALLS,
    conversation=trip_conversation,
    replies=[
        # two calls, a line each
        Reply(
            'Let me check.\n<tool_calls>\n{"name": "get_weather", "arguments": {"city": "São Paulo '
            '\\"Centro\\"\\nzona 1 ☀", "days": 3, "unit": "celsius"}}\n{"name": "plan_trip", "arguments": {"stops": '
            '[{"city": "Rome", "nights": 2}, {"city": "Oslo"}], "options": {"by": "train", "budget": {"max": 900}}}}'
            "\n</tool_calls>",
            "Let me check.",
            TWO_CALLS,
        ),
        # compact, on one line
        Reply(
            '<tool_calls>{"name":"get_weather","arguments":{"city":"Zürich","days":10,"tags":["sun","3"]}}</tool_calls>',
            "",
            LINES,
        ),
        Reply('<tool_calls>\n{"name": "plan_trip", "arguments": {}}\n</tool_calls>', "", NO_ARGUMENTS),
        # arguments written as a JSON string are the object it holds (sent whole)
        Reply(
            '<tool_calls>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_calls>',
            "",
            [("get_weather", {"city": "Oslo"})],
            grows=False,
        ),
    ],
    malformed=[
        # Hermes' and Apriel's syntax, garbage after the opener, cut in the name: content
        *content_only(
            'I would call <tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
            '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Rome"}}]</tool_calls>',
            "Hmm. <tool_calls> this is not a call",
            'Checking <tool_calls>\n{"name": "get_wea',
        ),
        # the block left open: the calls
        Reply(
            '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n',
            "",
            [("get_weather", {"city": "Rome"})],
        ),
        # arguments that are no object: the call with none, the rest content
        Reply(
            '<tool_calls>\n{"name": "get_weather", "arguments": [1, 2]}\n</tool_calls>',
            "[1, 2]}\n</tool_calls>",
            [("get_weather", {})],
        ),
        # a second line that is no call: the first call, the rest content
        Reply(
            '<tool_calls>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\nand then\n</tool_calls>',
            "and then\n</tool_calls>",
            [("get_weather", {"city": "Rome"})],
        ),
    ],
    cut=[
        Reply(
            'Checking.\n<tool_calls>\n{"name": "get_weather", "arguments": {"days":3,"city":"San Fr',
            "Checking.",
            [("get_weather", '{"days": 3, "city": "San Fr')],
        )
    ],
    opens='<tool_calls>\n{"name": "pick", "arguments": {',
    closes="</tool_calls>",
    control="</tool_calls>",
)

MINIMAX_FAMILIES = (M2_FAMILY, M3_FAMILY, M1_FAMILY)
