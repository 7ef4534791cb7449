"""Prompt formatting with the model's own chat template.

The published prompt (arXiv 2510.01132): the first user message gives the role, asks the model to
end its output with an action starting with a verb, states the objective, then
"current state: {obs}" and "your action:". Each later user message is the new observation
followed by "your action:". The history window keeps the first message and the last k
(action, observation) pairs; `None` keeps every turn.

Token-exactness: when the whole history is kept, each new turn's prompt is the previous
prompt + the sampled action ids + a *delta* (template glue + the observation). The delta is
the text the chat template puts between the end-of-turn token of an assistant message and the
next generation prompt, found by rendering the template twice (see `turn_delta_text`).
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase

from tripod.core.config import PromptSection

DEFAULT_INSTRUCTION = (
    "You are an expert game solver playing a text game. Think briefly if you need to, "
    "then end your output with an action starting with a verb, e.g. open box."
)


PromptConfig = PromptSection
"""How the chat shown to the model is built: the recipe's `prompt` section itself."""


def first_user_message(cfg: PromptConfig, objective: str, observation: str) -> str:
    return (
        f"{cfg.instruction or DEFAULT_INSTRUCTION}\n\nObjective: {objective.strip()}\n\n"
        f"current state: {observation.strip()}\nyour action:"
    )


def later_user_message(observation: str) -> str:
    return f"current state: {observation.strip()}\nyour action:"


def build_messages(cfg: PromptConfig, objective: str, first_obs: str,
                   history: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The chat for the next turn: history is [(action, observation_after_it), ...]."""
    msgs: list[dict[str, str]] = []
    if cfg.system_prompt is not None:
        msgs.append({"role": "system", "content": cfg.system_prompt})
    kept = history if cfg.history_window is None else history[len(history) - cfg.history_window:]
    if cfg.history_window == 0:
        kept = []
        if history:  # no past turns shown: the first message carries the latest observation
            first_obs = history[-1][1]
    msgs.append({"role": "user", "content": first_user_message(cfg, objective, first_obs)})
    for action, obs in kept:
        msgs.append({"role": "assistant", "content": action})
        msgs.append({"role": "user", "content": later_user_message(obs)})
    return msgs


def render_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of the chat with the generation prompt appended."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def turn_delta_text(tokenizer: PreTrainedTokenizerBase, cfg: PromptConfig, objective: str,
                    first_obs: str, observation: str, eos_text: str) -> str:
    """Template text between an assistant's end-of-turn token and the next generation prompt.

    Rendered with a placeholder action: P2 = render(chat + [assistant "X", user obs]) must
    start with P1 + "X" + eos_text where P1 = render(chat) with the generation prompt.
    """
    base = build_messages(cfg, objective, first_obs, [])
    p1 = tokenizer.apply_chat_template(base, tokenize=False, add_generation_prompt=True)
    nxt = base + [{"role": "assistant", "content": "X"},
                  {"role": "user", "content": later_user_message(observation)}]
    p2 = tokenizer.apply_chat_template(nxt, tokenize=False, add_generation_prompt=True)
    head = p1 + "X" + eos_text
    if not p2.startswith(head):
        raise ValueError(
            "the chat template does not append turns as a plain suffix; use a finite "
            "history window (prompt.history_window) for this model"
        )
    return p2[len(head):]
