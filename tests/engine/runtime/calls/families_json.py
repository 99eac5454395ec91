"""The contract data of the formats whose arguments are JSON (engine/runtime/prompt/calls/
jsoncalls/): Cohere, gpt-oss's harmony, Kimi K2 and K3, Nemotron Nano v2."""

from __future__ import annotations

from engine.runtime.prompt.calls.jsoncalls.cohere import COHERE
from engine.runtime.prompt.calls.jsoncalls.harmony import HARMONY
from engine.runtime.prompt.calls.jsoncalls.kimi import K3_MESSAGE_END, K3_RESPONSE_END, K3_TOOLS, K3_TOOLS_END
from engine.runtime.prompt.calls.jsoncalls.kimi import KIMI, KIMI_K3
from engine.runtime.prompt.calls.jsoncalls.nemotron import NEMOTRON
from engine.runtime.prompt.tools import parse_tools
from tests.callharness import DESCRIBED_TRIP_TOOLS, TRAVEL_CALLS, TRAVEL_TOOLS, travel_conversation, trip_conversation
from tests.engine.runtime.calls.families import Family, Reply, content_only

WEATHER = ("get_weather", {"city": "San Francisco", "days": 3})
TRIP = ("plan_trip", {"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": {"budget": 1200.5}})
#: the arguments of TRIP, cut before "Reno"
TRIP_CUT = '{"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "'
#: a string with quotes, a newline and unicode, an integer, an enum
QUOTED = {"city": 'Zürich "Altstadt"\nNord ☀', "days": 3, "unit": "celsius"}


def one_call_conversation(calls: list[tuple[str, dict]]) -> list[dict]:
    """A call and its result (gpt-oss's template renders one call per assistant turn)."""
    ((name, args),) = calls
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in SF?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": name, "arguments": args}}],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny"},
    ]


# --------------------------------------------------------------------------- Cohere
CO_ONE = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Zürich '
    '\\"Altstadt\\"\\nNord ☀", "days": 3, "unit": "celsius"}}\n]<|END_ACTION|>'
)
CO_TWO = (
    '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Zürich '
    '\\"Altstadt\\"\\nNord ☀", "days": 3, "unit": "celsius"}},\n    {"tool_call_id": "1", "tool_name": '
    '"plan_trip", "parameters": {"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": '
    '{"budget": 1200.5}}}\n]<|END_ACTION|>'
)
CO_WRONG_SEP = CO_TWO.replace("}},\n", "}};\n", 1)
COHERE_FAMILY = Family(
    COHERE,
    templates={
        "Cohere2MoE.jinja": "<|END_OF_TURN_TOKEN|>",
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": "<|END_OF_TURN_TOKEN|>",
    },
    shown_in_prompt=("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",),
    tools=DESCRIBED_TRIP_TOOLS,
    calls=[WEATHER, TRIP],
    conversation=trip_conversation,
    replies=[
        Reply(CO_ONE, "", [("get_weather", QUOTED)]),
        Reply(CO_TWO, "", [("get_weather", QUOTED), TRIP]),
        # keys in another order, compact: the same call (its arguments come before its name: sent whole)
        Reply(
            '<|START_ACTION|>[{"parameters":{"city":"Paris"},"tool_name":"get_weather","tool_call_id":"0"}]'
            "<|END_ACTION|>",
            "",
            [("get_weather", {"city": "Paris"})],
            grows=False,
        ),
    ],
    malformed=[
        # cut inside the name, no list, another family's keys, a name that is no string, garbage: content
        *content_only(
            '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "get_wea',
            '<|START_ACTION|>{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {}}<|END_ACTION|>',
            '<|START_ACTION|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|END_ACTION|>',
            '<|START_ACTION|>[{"tool_name": 7, "parameters": {}}]<|END_ACTION|>',
            "Let me see. <|START_ACTION|> this is not a call",
        ),
        # the list closed without <|END_ACTION|>, or something after it: the calls, the rest as content
        Reply(CO_ONE.removesuffix("<|END_ACTION|>"), "", [("get_weather", QUOTED)]),
        Reply(
            CO_ONE.removesuffix("<|END_ACTION|>") + "<|END_OF_TURN_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
            [("get_weather", QUOTED)],
        ),
        # a wrong separator after the first call: that call, the rest as content
        Reply(CO_WRONG_SEP, CO_WRONG_SEP[CO_WRONG_SEP.index(";\n    {") :], [("get_weather", QUOTED)]),
    ],
    cut=[Reply(CO_TWO[: CO_TWO.index("Reno")], "", [("get_weather", QUOTED), ("plan_trip", TRIP_CUT)])],
    opens='<|START_ACTION|>[{"tool_call_id":"',
    closes="]<|END_ACTION|>",
    control="<|END_ACTION|>",
)

# -------------------------------------------------------------------------- harmony
#: replies as gpt-oss writes them after the generation prompt ``<|start|>assistant``
HA_ONE = (
    '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Zürich \\"Altstadt\\"\\n'
    'Nord ☀","days":3,"unit":"celsius"}<|call|>'
)
HA_TWO = HA_ONE + (
    "<|start|>assistant<|channel|>commentary to=functions.plan_trip <|constrain|>json<|message|>"
    '{"stops": [{"city": "LA", "nights": [1, 2]}, {"city": "Reno"}], "options": {"budget": 1200.5}}<|call|>'
)
HARMONY_FAMILY = Family(
    HARMONY,
    templates={"openai-gpt-oss-120b.jinja": "<|start|>functions.get_weather to=assistant"},
    shown_in_prompt=(),
    tools=DESCRIBED_TRIP_TOOLS,
    calls=[WEATHER],
    conversation=one_call_conversation,
    replies=[Reply(HA_ONE, "", [("get_weather", QUOTED)]), Reply(HA_TWO, "", [("get_weather", QUOTED), TRIP])],
    malformed=[
        # cut in the name, the wrong marker before the arguments, garbage, arguments that are no JSON: content
        *content_only(
            "<|channel|>commentary to=functions.get_wea",
            '<|channel|>commentary to=functions.get_weather <|constrain|>json<|end|>{"city": "Paris"}<|call|>',
            "Let me see. <|channel|>commentary to=functions. this is not a call",
            "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>sunny please<|call|>",
        ),
        # whole arguments, then not <|call|>: the call, then the rest as content
        Reply(HA_ONE.replace("<|call|>", "<|end|>"), "<|end|>", [("get_weather", QUOTED)]),
    ],
    cut=[Reply(HA_TWO[: HA_TWO.index("Reno")], "", [("get_weather", QUOTED), ("plan_trip", TRIP_CUT)])],
    opens="<|channel|>commentary to=functions.pick <|constrain|>json<|message|>{",
    closes="<|call|>",
    control="<|call|>",
)

# ------------------------------------------------------------------------- Nemotron
NE_BAD_ARGS = '<TOOLCALL>[{"name": "get_weather", "arguments": [1, 2]}]</TOOLCALL>'
NEMOTRON_FAMILY = Family(
    NEMOTRON,
    templates={"NVIDIA-Nemotron-Nano-v2.jinja": "\n<SPECIAL_12>"},
    shown_in_prompt=("NVIDIA-Nemotron-Nano-v2.jinja",),
    tools=TRAVEL_TOOLS,
    calls=TRAVEL_CALLS,
    conversation=travel_conversation,
    replies=[
        Reply(
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, "unit": "celsius"}}, '
            '{"name": "note", "arguments": {"text": "He said \\"hi\\",\\nthen: Zürich — 東京 ☀"}}]</TOOLCALL>',
            "",
            [
                ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
                ("note", {"text": 'He said "hi",\nthen: Zürich — 東京 ☀'}),
            ],
        ),
        Reply(
            'Let me plan.\n<TOOLCALL>[{"name":"plan","arguments":{"stops":[{"city":"Rome","nights":2}],'
            '"options":{"rail":false,"budget":10}}}]</TOOLCALL>',
            "Let me plan.",
            [("plan", {"stops": [{"city": "Rome", "nights": 2}], "options": {"rail": False, "budget": 10}})],
        ),
    ],
    malformed=[
        # another family's markers, garbage after the opener, no list, cut in the name: content
        *content_only(
            'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            "Sure <TOOLCALL>this is not a call",
            '<TOOLCALL>{"name": "get_weather"}</TOOLCALL>',
            'Checking <TOOLCALL>[{"name": "get_wea',
        ),
        # the list left open: the calls
        Reply(
            '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris"}}',
            "",
            [("get_weather", {"city": "Paris"})],
        ),
        # arguments that are no object: the call with none (it may have been streamed), the rest content
        Reply(NE_BAD_ARGS, "[1, 2]}]</TOOLCALL>", [("get_weather", {})]),
    ],
    cut=[
        Reply(
            'Checking.<TOOLCALL>[{"name": "get_weather", "arguments": {"days":3,"city":"San Fr',
            "Checking.",
            [("get_weather", '{"days": 3, "city": "San Fr')],
        )
    ],
    opens='<TOOLCALL>[{"name":"pick","arguments":{',
    closes="</TOOLCALL>",
    control="</TOOLCALL>",
)

# -------------------------------------------------------------------------- Kimi K2
B, C, A, E, END = KIMI.BEGIN, KIMI.CALL, KIMI.ARGS, KIMI.CALL_END, KIMI.END
#: the travel tools with a dotted name (``web.search``) in place of ``note``
KIMI_TOOLS = (
    *TRAVEL_TOOLS[:2],
    *parse_tools(
        [
            {
                "type": "function",
                "function": {
                    "name": "web.search",
                    "description": "A dotted name.",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
                },
            },
        ]
    ),
)
KIMI_FAMILY = Family(
    KIMI,
    templates={
        "Kimi-K2-Instruct.jinja": "<|im_end|>",
        "Kimi-K2-Thinking.jinja": "<|im_end|>",
        "moonshotai-Kimi-K2.jinja": "<|im_end|>",
    },
    shown_in_prompt=(),
    tools=KIMI_TOOLS,
    calls=TRAVEL_CALLS,
    conversation=travel_conversation,
    replies=[
        Reply(
            f'Let me check.{B}{C}functions.get_weather:0{A}{{"city": "San Francisco", "days": 3, "unit": "celsius"}}'
            f'{E}{C}functions.web.search:1{A}{{"q":"He said \\"hi\\",\\nthen: Zürich — 東京 ☀"}}{E}{END}',
            "Let me check.",
            [
                ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
                ("web.search", {"q": 'He said "hi",\nthen: Zürich — 東京 ☀'}),
            ],
        ),
        # spaced as K2 is often decoded; the index counts the conversation's calls
        Reply(
            f'{B} {C} functions.plan:7 {A} {{"stops": [{{"city": "Rome", "nights": 2}}], '
            f'"options": {{"rail": false}}}} {E} {END}',
            "",
            [("plan", {"stops": [{"city": "Rome", "nights": 2}], "options": {"rail": False}})],
        ),
        # a bare name
        Reply(f'{B}{C}get_weather{A}{{"city": "Oslo"}}{E}{END}', "", [("get_weather", {"city": "Oslo"})]),
    ],
    malformed=[
        # another family's markers, garbage after the opener, cut in the name: content
        *content_only(
            'I would call <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
            f"Sure {B}this is not a call",
            f"Checking {B}{C}functions.get_wea",
        ),
        # the section left open: the calls
        Reply(f'{B}{C}functions.get_weather:0{A}{{"city": "Paris"}}{E}', "", [("get_weather", {"city": "Paris"})]),
        # arguments that are no object: the call with none (it may have been streamed), the rest content
        Reply(f"{B}{C}functions.get_weather:0{A}[1, 2]{E}{END}", f"[1, 2]{E}{END}", [("get_weather", {})]),
    ],
    cut=[
        Reply(
            f'Checking.{B}{C}functions.get_weather:0{A}{{"days":3,"city":"San Fr',
            "Checking.",
            [("get_weather", '{"days": 3, "city": "San Fr')],
        )
    ],
    opens=f"{B}{C}functions.pick:",
    closes=END,
    control=E,
)

# -------------------------------------------------------------------------- Kimi K3
#: ``<|open|>TAG ATTRS<|sep|>`` … ``<|close|>TAG<|sep|>``; the calls follow the response block
RE, TS, TE, ME = K3_RESPONSE_END, K3_TOOLS, K3_TOOLS_END, K3_MESSAGE_END


def k3_call(name: str, *args: str, index: int = 1) -> str:
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{"".join(args)}<|close|>call<|sep|>'


def k3_arg(key: str, kind: str | None, value: str) -> str:
    typ = f' type="{kind}"' if kind else ""
    return f'<|open|>argument key="{key}"{typ}<|sep|>{value}<|close|>argument<|sep|>'


K3_WEATHER = k3_call("get_weather", k3_arg("city", "string", "Paris"), k3_arg("days", "number", "3"))
K3_FAMILY = Family(
    KIMI_K3,
    templates={"Kimi-K3.jinja": "<|end_of_msg|>"},  # read past the tools and the message's end
    shown_in_prompt=(),
    tools=KIMI_TOOLS,
    calls=TRAVEL_CALLS,
    conversation=travel_conversation,
    replies=[
        # after the response's text (the prompt opened the response block); a string with quotes,
        # newlines and unicode, a number, an enum; the message's end after the tools
        Reply(
            "Let me check."
            + RE
            + TS
            + k3_call(
                "get_weather",
                k3_arg("city", "string", 'São Paulo "Centro"\nzona 1 ☀'),
                k3_arg("days", "number", "3"),
                k3_arg("unit", "string", "celsius"),
            )
            + k3_call("web.search", k3_arg("q", "string", 'He said "hi" & left: <b> 東京'), index=2)
            + TE
            + ME,
            "Let me check.",
            [
                ("get_weather", {"city": 'São Paulo "Centro"\nzona 1 ☀', "days": 3, "unit": "celsius"}),
                ("web.search", {"q": 'He said "hi" & left: <b> 東京'}),
            ],
        ),
        # nested values as JSON; no response block; a value with no type, typed by the schema
        Reply(
            TS
            + k3_call(
                "plan",
                k3_arg("stops", "array", '[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]'),
                k3_arg("options", None, '{"budget": 900.5, "rail": false}'),
            )
            + TE,
            "",
            [
                (
                    "plan",
                    {
                        "stops": [{"city": "Rome", "nights": 2}, {"city": "Oslo"}],
                        "options": {"budget": 900.5, "rail": False},
                    },
                )
            ],
        ),
        # the type says how a value is written, whatever the schema says; an escaped attribute
        Reply(
            TS
            + k3_call(
                "get_weather",
                k3_arg("city", "string", "42"),
                k3_arg("days", "string", "3"),  # an integer in the schema
                k3_arg("a&amp;&quot;b", "boolean", "true"),
            )
            + TE,
            "",
            [("get_weather", {"city": "42", "days": "3", 'a&"b': True})],
        ),
        # the arguments as one JSON object (the template's way for arguments given as a string)
        Reply(
            RE
            + TS
            + k3_call("get_weather", '<|open|>json type="object"<|sep|>{"city":"Oslo","days":2}<|close|>json<|sep|>')
            + TE,
            "",
            [("get_weather", {"city": "Oslo", "days": 2})],
        ),
        # no arguments
        Reply(TS + k3_call("plan") + TE, "", [("plan", {})]),
    ],
    malformed=[
        # another family's markers, garbage after the opener (the response block's end too), cut in
        # the name, a head that is no tag's: content
        *content_only(
            f"I would call {B}{C}functions.get_weather:0{A}{{}}{E}{END}",
            f"Sure{RE}{TS}this is not a call",
            f'Checking{RE}{TS}<|open|>call tool="get_wea',
            f'{TS}<|open|>call tool="get_weather" what<|sep|>',
        ),
        # the tools left open: the calls
        Reply(TS + K3_WEATHER, "", [("get_weather", {"city": "Paris", "days": 3})]),
        # a string closed by the call's end: it ends there, the rest is content
        Reply(
            TS + k3_call("get_weather", '<|open|>argument key="city" type="string"<|sep|>Paris') + TE,
            f"<|close|>call<|sep|>{TE}",
            [("get_weather", {"city": "Paris"})],
        ),
        # a number closed by another tag: the call ends with it, the rest is content
        Reply(
            TS
            + '<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="days" type="number"<|sep|>3'
            + k3_arg("city", "string", "Rome")
            + "<|close|>call<|sep|>"
            + TE,
            k3_arg("city", "string", "Rome") + "<|close|>call<|sep|>" + TE,
            [("get_weather", {"days": 3})],
        ),
        # text after a call's head: the call, named, ends there
        Reply(
            f'{TS}<|open|>call tool="get_weather" index="1"<|sep|>Sure, the weather.',
            "Sure, the weather.",
            [("get_weather", {})],
        ),
        # a wrong closing tag after the arguments; the second call is content
        Reply(
            TS + K3_WEATHER.replace("<|close|>call<|sep|>", "<|close|>cal<|sep|>") + k3_call("plan", index=2) + TE,
            "<|close|>cal<|sep|>" + k3_call("plan", index=2) + TE,
            [("get_weather", {"city": "Paris", "days": 3})],
        ),
        # a JSON block that is not an object: the call with no arguments, the rest content
        Reply(
            TS + k3_call("get_weather", '<|open|>json type="object"<|sep|>[1, 2]<|close|>json<|sep|>') + TE,
            "[1, 2]<|close|>json<|sep|><|close|>call<|sep|>" + TE,
            [("get_weather", {})],
        ),
    ],
    cut=[
        # a marker's beginning held back
        Reply(
            f'Checking.{RE}{TS}<|open|>call tool="get_weather" index="1"<|sep|>{k3_arg("days", "number", "3")}'
            '<|open|>argument key="city" type="string"<|sep|>San Fr<|clo',
            "Checking.",
            [("get_weather", '{"days": 3, "city": "San Fr')],
        )
    ],
    opens=RE + TS + '<|open|>call tool="pick" index="',
    closes=TE,
    control="<|close|>",
)

JSON_FAMILIES = (COHERE_FAMILY, HARMONY_FAMILY, NEMOTRON_FAMILY, KIMI_FAMILY, K3_FAMILY)
