"""What the agent-API tests share: two tiny models carrying real chat templates (Qwen3.5's and
Qwen2.5's) served by a real engine and server, the official OpenAI and Anthropic clients on it, and
the tools and schemas they send. The fixtures (``agent_served``, ``oai``, ``claude``) are in
conftest.py."""

from __future__ import annotations


QWEN, HERMES = "qwen35", "hermes"
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
        "required": ["city"],
    },
}
ASK = "What is the weather in Paris?"
PET = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
