"""The contract data of the formats that write arguments as parameters (engine/runtime/
prompt/calls/paramcalls/): Hy3, DeepSeek's DSML (V3.2, V4), Gemma 4 and GLM (4.5/4.6, 4.7,
Ling 3); MiniMax's are in families_minimax.py."""

from __future__ import annotations

from engine.runtime.prompt.calls.base import ToolFormat
from engine.runtime.prompt.calls.paramcalls.dsml import DSML, DSML_V4, DSML_V32
from engine.runtime.prompt.calls.paramcalls.gemma4 import GEMMA4
from engine.runtime.prompt.calls.paramcalls.glm import GLM, GLM47, LING
from engine.runtime.prompt.calls.paramcalls.hy3 import HY3
from tests.callharness import TRAVEL_CALLS, TRAVEL_TOOLS, TRIP_CALLS, TRIP_TOOLS, travel_conversation, trip_conversation
from tests.engine.runtime.calls.families import Family, Reply, content_only

#: the calls of the replies "two calls": a string with quotes, a newline and unicode, an
#: integer, an enum; nested JSON
TWO_CALLS = [
    ("get_weather", {"city": 'São Paulo "Centro"\nzona 1 ☀', "days": 3, "unit": "celsius"}),
    (
        "plan_trip",
        {
            "stops": [{"city": "Rome", "nights": 2}, {"city": "Oslo"}],
            "options": {"by": "train", "budget": {"max": 900}},
        },
    ),
]
#: the first of them cut before "zona"
CUT_CITY = '{"city": "São Paulo \\"Centro\\"\\n'


# ----------------------------------------------------------------------------- Hy3
HY_TWO = (
    "Let me check.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
    '<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>São Paulo "Centro"\nzona 1 ☀'
    "</arg_value:opensource>\n<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>3"
    "</arg_value:opensource>\n<arg_key:opensource>unit</arg_key:opensource>\n<arg_value:opensource>"
    "celsius</arg_value:opensource>\n</tool_call:opensource>\n<tool_call:opensource>plan_trip"
    "<tool_sep:opensource>\n<arg_key:opensource>stops</arg_key:opensource>\n<arg_value:opensource>"
    '[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]</arg_value:opensource>\n<arg_key:opensource>'
    'options</arg_key:opensource>\n<arg_value:opensource>{"by": "train", "budget": {"max": 900}}'
    "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>"
)
HY_WRONG = HY_TWO.replace("</tool_call:opensource>", "</tool_call>", 1)
HY3_FAMILY = Family(
    HY3,
    templates={"tencent-Hy3.jinja": "<｜hy_eos:opensource｜>"},  # the block's end marker is the calls'
    shown_in_prompt=("tencent-Hy3.jinja",),
    tools=TRIP_TOOLS,
    calls=TRIP_CALLS,
    conversation=trip_conversation,
    replies=[
        Reply(HY_TWO, "Let me check.", TWO_CALLS),
        Reply(
            "<tool_calls:opensource><tool_call:opensource>get_weather<tool_sep:opensource><arg_key:opensource>city"
            "</arg_key:opensource><arg_value:opensource>Zürich</arg_value:opensource></tool_call:opensource>"
            "</tool_calls:opensource>",
            "",
            [("get_weather", {"city": "Zürich"})],
        ),
        Reply(
            "<tool_calls:opensource>\n<tool_call:opensource>plan_trip<tool_sep:opensource>\n"
            "</tool_call:opensource>\n</tool_calls:opensource>",
            "",
            [("plan_trip", {})],
        ),
    ],
    malformed=[
        # cut inside the second call's name: the first call, then the rest as content
        Reply(HY_TWO[: HY_TWO.index("plan_trip") + 4], "Let me check.<tool_call:opensource>plan", TWO_CALLS[:1]),
        # no end marker for the block: the calls all the same
        Reply(HY_TWO[: HY_TWO.index("</tool_calls:opensource>")], "Let me check.", TWO_CALLS),
        # a wrong closing marker: the call closes there, the rest is content
        Reply(HY_WRONG, "Let me check." + HY_WRONG[HY_WRONG.index("</tool_call>") :], TWO_CALLS[:1]),
        # a call outside a block, garbage after the opener, JSON arguments, a name with a space: content
        *content_only(
            "<tool_call:opensource>get_weather<tool_sep:opensource>\n</tool_call:opensource>",
            "Hmm. <tool_calls:opensource> this is not a call",
            '<tool_calls:opensource><tool_call:opensource>get_weather<tool_sep:opensource>{"city": "Rome"}'
            "</tool_call:opensource></tool_calls:opensource>",
            "<tool_calls:opensource><tool_call:opensource>get weather<tool_sep:opensource>",
        ),
    ],
    cut=[Reply(HY_TWO[: HY_TWO.index("zona")], "Let me check.", [("get_weather", CUT_CITY)])],
    opens="<tool_calls:opensource>",
    closes="</tool_calls:opensource>",
    control=HY3.VALUE_END,
)

# ---------------------------------------------------------------------------- DSML
D = DSML
DS_TWO = (
    f'Let me check.\n\n<{D}function_calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" '
    f'string="true">São Paulo "Centro"\nzona 1 ☀</{D}parameter>\n<{D}parameter name="days" '
    f'string="false">3</{D}parameter>\n<{D}parameter name="unit" string="true">celsius</{D}parameter>\n'
    f'</{D}invoke>\n<{D}invoke name="plan_trip">\n<{D}parameter name="stops" string="false">[{{"city": '
    f'"Rome", "nights": 2}}, {{"city": "Oslo"}}]</{D}parameter>\n<{D}parameter name="options" '
    f'string="false">{{"by": "train", "budget": {{"max": 900}}}}</{D}parameter>\n</{D}invoke>\n'
    f"</{D}function_calls>"
)
DS_WRONG = DS_TWO.replace(f"</{D}invoke>", "</|DSML|invoke>", 1)  # ASCII bars


def dsml_family(fmt: ToolFormat, other: ToolFormat, names: list[str]) -> Family:
    """V3.2's replies (``function_calls``) as ``fmt`` writes them (its own block)."""

    def block(text: str, version: ToolFormat = fmt) -> str:
        """``text`` in ``version``'s block (``fmt``'s unless said)."""
        return text.replace("function_calls>", f"{version.block}>")

    two = block(DS_TWO)
    return Family(
        fmt,
        templates=dict.fromkeys(names, "<｜end▁of▁sentence｜>"),  # the block is read to its end
        shown_in_prompt=tuple(names),
        tools=TRIP_TOOLS,
        calls=TRIP_CALLS,
        conversation=trip_conversation,
        replies=[
            Reply(two, "Let me check.", TWO_CALLS),
            # no string attribute: typed by the tool's schema; no whitespace between the tags
            Reply(
                block(
                    f'<{D}function_calls><{D}invoke name="get_weather"><{D}parameter name="city">Zürich</{D}parameter>'
                    f'<{D}parameter name="days">10</{D}parameter></{D}invoke></{D}function_calls>'
                ),
                "",
                [("get_weather", {"city": "Zürich", "days": 10})],
            ),
            # the arguments as one JSON object
            Reply(
                block(
                    f'<{D}function_calls>\n<{D}invoke name="get_weather">\n{{"city": "Tokyo", "unit": "fahrenheit"}}\n'
                    f"</{D}invoke>\n</{D}function_calls>"
                ),
                "",
                [("get_weather", {"city": "Tokyo", "unit": "fahrenheit"})],
            ),
            Reply(
                block(f'<{D}function_calls>\n<{D}invoke name="plan_trip">\n\n</{D}invoke>\n</{D}function_calls>'),
                "",
                [("plan_trip", {})],
            ),
        ],
        malformed=[
            # cut inside the second call's name: the first call, then the rest as content
            Reply(two[: two.index("plan_trip") + 4], f'Let me check.<{D}invoke name="plan', TWO_CALLS[:1]),
            # a wrong closing marker (ASCII bars): the call closes there, the rest is content
            Reply(
                block(DS_WRONG),
                "Let me check." + block(DS_WRONG)[block(DS_WRONG).index("</|DSML|invoke>") :],
                TWO_CALLS[:1],
            ),
            # the other version's block, garbage after the opener, a name with nothing of a call
            # after it, ASCII bars, an invoke with no name: content
            *content_only(
                block(DS_TWO, other),
                block(f"Hmm. <{D}function_calls> this is not a call"),
                block(f'<{D}function_calls>\n<{D}invoke name="get_weather">\nSure, the weather.'),
                block('<|DSML|function_calls>\n<|DSML|invoke name="get_weather">\n</|DSML|invoke>'),
                block(f"<{D}function_calls>\n<{D}invoke>\n</{D}invoke>\n</{D}function_calls>"),
            ),
        ],
        cut=[Reply(two[: two.index("zona")], "Let me check.", [("get_weather", CUT_CITY)])],
        opens=f'{fmt.trigger}\n<{D}invoke name="pick">',
        closes=f"</{D}{fmt.block}>",
        control=D,
    )


DSML_V32_FAMILY = dsml_family(DSML_V32, DSML_V4, ["deepseek-ai-DeepSeek-V3.2.jinja"])
DSML_V4_FAMILY = dsml_family(
    DSML_V4, DSML_V32, ["deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja"]
)

# -------------------------------------------------------------------------- Gemma 4
Q = '<|"|>'
GEMMA4_FAMILY = Family(
    GEMMA4,
    templates={
        # the calls are read with the <|tool_response> that ends them
        "google-gemma-4-31B-it.jinja": "response:get_weather",
        "google-gemma-4-31B-it-interleaved.jinja": "<turn|>",
    },
    shown_in_prompt=(),
    tools=TRAVEL_TOOLS,
    calls=TRAVEL_CALLS,
    conversation=travel_conversation,
    replies=[
        Reply(
            f"Let me check.<|tool_call>call:get_weather{{city:{Q}San Francisco{Q},days:3,unit:{Q}celsius{Q}}}"
            f'<tool_call|><|tool_call>call:note{{text:{Q}He said "hi",\nthen left: Zürich — 東京 ☀{Q}}}<tool_call|>'
            "<|tool_response>",
            "Let me check.",
            [
                ("get_weather", {"city": "San Francisco", "days": 3, "unit": "celsius"}),
                ("note", {"text": 'He said "hi",\nthen left: Zürich — 東京 ☀'}),
            ],
        ),
        Reply(
            f"<|tool_call>call:plan{{options:{{budget:99.5,rail:true}},stops:[{{city:{Q}Rome{Q},nights:2}},"
            f"{{city:{Q}Bari{Q}}}]}}<tool_call|>",
            "",
            [
                (
                    "plan",
                    {
                        "options": {"budget": 99.5, "rail": True},
                        "stops": [{"city": "Rome", "nights": 2}, {"city": "Bari"}],
                    },
                )
            ],
        ),
        # a bare value of a string parameter is its text; a number of one is a number
        Reply(
            "<|tool_call>call:get_weather{city:Oslo,days: 2 ,unit:fahrenheit}<tool_call|>",
            "",
            [("get_weather", {"city": "Oslo", "days": 2, "unit": "fahrenheit"})],
        ),
    ],
    malformed=[
        # another family's markers, garbage after the opener, cut in the name: content
        *content_only(
            "I would call <tool_call>call:get_weather{city:Paris}</tool_call>",
            "Sure <|tool_call>this is not a call",
            "Checking <|tool_call>call:get_wea",
        ),
        # the wrong closer: the call ends where it stops, and what follows is content
        Reply(
            f"<|tool_call>call:get_weather{{city:{Q}Paris{Q}}}</tool_call>",
            "</tool_call>",
            [("get_weather", {"city": "Paris"})],
        ),
        # arguments not in Gemma's syntax: the call with what was read of them, closed so that
        # they parse (it may have been streamed), the rest content
        Reply(
            f"<|tool_call>call:get_weather{{city:Paris {Q}oops{Q}}}<tool_call|>",
            f"{{city:Paris {Q}oops{Q}}}<tool_call|>",
            [("get_weather", {"city": "Paris"})],
        ),
    ],
    cut=[
        Reply(
            f"Checking.<|tool_call>call:get_weather{{days:3,city:{Q}San Fr",
            "Checking.",
            [("get_weather", '{"days": 3, "city": "San Fr')],
        )
    ],
    opens="<|tool_call>call:pick{",
    closes="<tool_call|>",
    control=Q,
)

# ----------------------------------------------------------------------------- GLM
GLM_TWO = (
    # GLM-4.6's whitespace
    'Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>São Paulo "Centro"\n'
    "zona 1 ☀</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n"
    "<arg_value>celsius</arg_value>\n</tool_call>\n<tool_call>plan_trip\n<arg_key>stops</arg_key>\n"
    '<arg_value>[{"city": "Rome", "nights": 2}, {"city": "Oslo"}]</arg_value>\n'
    '<arg_key>options</arg_key>\n<arg_value>{"by": "train", "budget": {"max": 900}}</arg_value>\n'
    "</tool_call>"
)
#: GLM-4.7's: no whitespace at all
GLM_COMPACT = (
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Zürich</arg_value><arg_key>days</arg_key>"
    "<arg_value>10</arg_value></tool_call>"
)
GLM_WRONG = GLM_TWO.replace("</tool_call>", "</tool_cal>", 1)
GLM_NO_VALUE = GLM_COMPACT.replace("<arg_value>10", "10")
#: each layout reads the others' replies (the formats differ in how they write calls)
GLM_REPLIES = [
    Reply(GLM_TWO, "Let me check.", TWO_CALLS),
    Reply(GLM_COMPACT, "", [("get_weather", {"city": "Zürich", "days": 10})]),
    # Ling's: a newline before <arg_value> and </tool_call>, none between arguments
    Reply(
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Tokyo</arg_value><arg_key>unit</arg_key>\n"
        "<arg_value>fahrenheit</arg_value>\n</tool_call>",
        "",
        [("get_weather", {"city": "Tokyo", "unit": "fahrenheit"})],
    ),
    Reply("<tool_call>plan_trip\n</tool_call>", "", [("plan_trip", {})]),
]
GLM_MALFORMED = [
    # cut inside the second call's name: the first call, then the rest as content
    Reply(GLM_TWO[: GLM_TWO.index("plan_trip") + 4], "Let me check.<tool_call>plan", TWO_CALLS[:1]),
    # a wrong closing marker: the call closes there, the rest is content
    Reply(GLM_WRONG, "Let me check." + GLM_WRONG[GLM_WRONG.index("</tool_cal>") :], TWO_CALLS[:1]),
    # a missing closing marker: the next call's opener closes the call
    Reply(GLM_TWO.replace("</tool_call>\n", "", 1), "Let me check.", TWO_CALLS),
    # a key with no value: the call closes before it
    Reply(GLM_NO_VALUE, "<arg_key>days</arg_key>10</arg_value></tool_call>", [("get_weather", {"city": "Zürich"})]),
    # garbage after the opener, JSON where GLM's arguments belong (Hermes' too), another tag: content
    *content_only(
        "Hmm. <tool_call> this is not a call",
        '<tool_call>get_weather {"city": "Rome"}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>',
        "<tool_call>get_weather<b>x</b>",
    ),
]


def glm_family(fmt: ToolFormat, templates: dict[str, str], shown_in_prompt: tuple[str, ...]) -> Family:
    """A GLM layout: its own templates, and the replies and grammar every layout shares."""
    return Family(
        fmt,
        templates=templates,
        shown_in_prompt=shown_in_prompt,
        tools=TRIP_TOOLS,
        calls=TRIP_CALLS,
        conversation=trip_conversation,
        replies=GLM_REPLIES,
        malformed=GLM_MALFORMED,
        cut=[Reply(GLM_TWO[: GLM_TWO.index("zona")], "Let me check.", [("get_weather", CUT_CITY)])],
        opens="<tool_call>pick",
        closes="</tool_call>",
        control="</arg_value>",
    )


#: the templates that write each layout (Spark 2.5 and poolside's Laguna write GLM's markers
#: too), what they write after the calls, and those that show the opener in their prompt
GLM_FAMILY = glm_family(
    GLM,
    {
        "GLM-4.6.jinja": "<|observation|>",
        "poolside-Laguna-XS-2.1.jinja": "</assistant>",
        "poolside-Laguna-XS.2.jinja": "</assistant>",
    },
    ("GLM-4.6.jinja", "poolside-Laguna-XS-2.1.jinja", "poolside-Laguna-XS.2.jinja"),
)
GLM47_FAMILY = glm_family(
    GLM47,
    {
        "GLM-4.7-Flash.jinja": "<|observation|>",
        "Spark2.5.jinja": "<｜end▁of▁sentence｜>",
        "poolside-Laguna-S-2.1.jinja": "</assistant>",
    },
    ("GLM-4.7-Flash.jinja",),
)
LING_FAMILY = glm_family(
    LING, {"inclusionai-ling-3.0-flash.jinja": "<|role_end|>"}, ("inclusionai-ling-3.0-flash.jinja",)
)

PARAM_FAMILIES = (HY3_FAMILY, DSML_V32_FAMILY, DSML_V4_FAMILY, GEMMA4_FAMILY, GLM_FAMILY, GLM47_FAMILY, LING_FAMILY)
