"""Families whose calls carry their arguments as JSON (Hermes, Llama 3, Mistral, DeepSeek,
Kimi, GPT-OSS harmony, Cohere, Nemotron, Functionary, the generic format)."""
