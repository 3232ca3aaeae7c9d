"""Integrations of exact forgetting with agent frameworks; each sits behind an optional extra.

`unsee.impl.integrations.langgraph`: LangGraph agents (`pip install unsee[langgraph]`).
"""
