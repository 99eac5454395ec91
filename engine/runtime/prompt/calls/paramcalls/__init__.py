"""Families whose calls write their arguments as parameters, converted to JSON text as they
are written (Qwen XML, GLM and Hy3, DeepSeek DSML, MiniMax, Gemma 4)."""
