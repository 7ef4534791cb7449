"""tripod: multi-turn agentic RL for LLM agents (environment, reward, policy)."""

__version__ = "0.1.0"
