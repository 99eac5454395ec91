"""What each API's requests and replies look like: OpenAI Responses, Anthropic Messages and
Ollama (chat completions' are :mod:`engine.server.schemas`), the media parts every API's
pictures become, and the one thinking switch. The routes (:mod:`engine.server.routes`)
serve them; the engine sees only the conversation and the job they make."""
