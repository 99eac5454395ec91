"""GLM's calls, ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``
(GLM-4.5/4.6, GLM-4.7, Ling 3), beyond the contract every format keeps (test_contract.py):
how a value is typed."""

from __future__ import annotations

import json

from engine.runtime.prompt.calls.paramcalls.glm import GLM
from engine.runtime.prompt.reply import split
from tests.callharness import TRIP_TOOLS as TOOLS


def test_a_string_parameter_is_taken_as_written_and_others_are_json():
    """The tool's schema types a value: a string parameter as written, any other as JSON
    (spaces around it aside); for a tool not offered every value that is JSON is JSON."""
    text = (
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>42</arg_value><arg_key>days</arg_key>"
        "<arg_value> 42 </arg_value></tool_call>"
    )
    (call,) = split(text, fmt=GLM, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": "42", "days": 42}
    (call,) = split(text.replace("get_weather", "other"), fmt=GLM, tools=TOOLS).calls
    assert json.loads(call.arguments) == {"city": 42, "days": 42}
