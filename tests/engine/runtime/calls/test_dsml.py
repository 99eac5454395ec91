"""DeepSeek's DSML calls, ``<｜DSML｜invoke name=…><｜DSML｜parameter name=… string=…>V</｜DSML｜parameter>``
inside ``<｜DSML｜function_calls>`` (V3.2) or ``<｜DSML｜tool_calls>`` (V4), beyond the
contract every format keeps (test_contract.py): the ``string`` attribute, and the grammar
under ``auto`` where the opener holds a control token."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.base import text_lit
from engine.runtime.prompt.calls.paramcalls.dsml import DSML, DSML_V32
from engine.runtime.prompt.reply import split
from engine.runtime.prompt.replygrammar import reply_grammar
from engine.runtime.prompt.tools import ToolChoice
from tests.callharness import TRIP_TOOLS as TOOLS
from tests.engine.runtime.calls.families import PICK

D = DSML


def test_the_string_attribute_says_how_a_value_is_written():
    """``string="true"`` takes a value as text, ``string="false"`` as JSON, whatever the
    schema says; without it the tool's schema types the value, and for a tool not offered a
    value that is JSON is JSON."""
    text = (
        f'<{D}function_calls><{D}invoke name="get_weather"><{D}parameter name="city" string="false">42'
        f'</{D}parameter><{D}parameter name="days" string="true">42</{D}parameter></{D}invoke></{D}function_calls>'
    )
    (call,) = split(text, fmt=DSML_V32, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": 42, "days": "42"}
    plain = text.replace(' string="false"', "").replace(' string="true"', "")
    assert json.loads(split(plain, fmt=DSML_V32, tools=TOOLS).calls[0].arguments) == {"city": "42", "days": 42}
    other = split(plain.replace("get_weather", "other"), fmt=DSML_V32, tools=TOOLS).calls[0]
    assert json.loads(other.arguments) == {"city": 42, "days": 42}


def test_auto_compiles_where_the_opener_holds_a_special_token():
    """Under ``auto`` the reply is free text up to the calls' opener; an opener that is
    text, then a control token, then text (DSML's ``"<" <[1]> "function_calls>"``) cannot
    end a lazy rule, so the free text runs in stretches up to its text part."""
    from engine.runtime.decode.grammar import compile_grammar

    def lit(s: str) -> str:
        parts = s.split(DSML)
        return " ".join(p for i, x in enumerate(parts) for p in (["<[1]>"] if i else []) + ([text_lit(x)] if x else []))

    spec = reply_grammar(lit=lit, fmt=DSML_V32, tools=PICK, choice=ToolChoice("auto"))
    assert "call_hd_s[lazy]" in json.loads(spec.source)["grammars"][0]["lark_grammar"]
    compile_grammar(spec)  # raises where llguidance rejects it
