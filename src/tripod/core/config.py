"""Typed configuration: one pydantic model per component, loaded from YAML recipes.

Every field is documented once (its docstring becomes its description). Unknown keys and
wrong types are errors that name the key, raised before any work starts. Recipes are
overridden from the command line with dotted keys: ``rollout.group_size=8``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tripod.core.estimators import ESTIMATORS


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True,
                              validate_assignment=True)


class RunSection(_Section):
    name: str = "run"
    """Run name; the run directory is ``{out_dir}/{name}``."""
    out_dir: str = "runs"
    """Where run directories are created."""
    seed: int = 0
    """Seeds torch, game order and sampling; equal seeds give equal runs."""


class LoraSection(_Section):
    enabled: bool = False
    """Train LoRA adapters (peft) instead of all weights; the reference policy is then the
    base model with adapters disabled (no second copy)."""
    r: int = Field(16, ge=1)
    """LoRA rank."""
    alpha: int = Field(32, ge=1)
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the LoRA branch."""
    target_modules: list[str] = Field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    """Module names that get adapters (all attention and MLP projections by default)."""


class ModelSection(_Section):
    name: str = "smollm2-135m"
    """`smollm2-135m`, `tiny`, or a local Hugging Face model / checkpoint folder."""
    lora: LoraSection = Field(default_factory=LoraSection)
    """LoRA adapters (off by default: full fine-tuning)."""
    device: str = "cpu"
    """`cpu` or `cuda`. Training and sampling run in fp32 on CPU (bf16 is slower there)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations during the backward pass instead of keeping
    them (SFT and RL updates, the critic's copy too): activation memory drops to about one
    layer's, for one more forward pass per update. The gradients are the same."""


class FaultsSection(_Section):
    rate: float = Field(0.0, ge=0.0, le=1.0)
    """Share of env steps that fail on purpose (fault injection, `envs/faults.py`; 0: off).
    For reliability tests and smoke runs, never for a study's numbers."""
    kinds: list[Literal["raise", "hang", "garbage", "kill"]] = Field(
        default_factory=lambda: ["raise", "hang", "garbage", "kill"], min_length=1)
    """Faults drawn (uniformly) for a failing step: `raise` an exception, `hang` past
    `rollout.env_timeout_s`, return `garbage` (None, wrong types, a 10 MB or invalid UTF-8
    observation, a NaN reward), `kill` the env's child process."""
    seed: int = 0
    """Seeds which steps fail and how, together with each episode's sampling seed."""
    splits: list[Literal["train", "sft", "valid", "test"]] = Field(
        default_factory=lambda: ["train"])
    """Game splits whose episodes get faults (training only by default: evaluations and
    demonstrations play clean envs)."""


class EnvSection(_Section):
    id: str = "textworld/w2-o3-q4"
    """Env id (see `tripod envs list`)."""
    max_turns: int = Field(12, ge=1)
    """Turn cap per episode (12 for w2-o3-q4; 24 for larger games)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Env-specific overrides passed to `tripod.envs.make`."""
    options_by_env: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Options of the run's other env ids (a training or demonstration mix, other evaluated
    envs), by env id, e.g. `{textworld/w4-o6-q8: {inventory: true}}`; an env id not named
    here plays with its defaults. `options` alone apply to `id`."""
    faults: FaultsSection = Field(default_factory=FaultsSection)
    """Fault injection on env steps (off unless `rate` > 0)."""


class PromptSection(_Section):
    instruction: str | None = None
    """Role and answer format shown before the objective; None uses tripod's default."""
    system_prompt: str | None = None
    """A system message; None keeps the chat template's default (if it has one)."""
    history_window: int | None = Field(None, ge=0)
    """Keep the last k turns in the prompt; None keeps all (and reuses the KV cache)."""


class RewardSection(_Section):
    kind: Literal["sparse", "dense", "final_score"] = "sparse"
    """`sparse`: 1 on the last turn of a won episode. `dense`: each turn's progress gain
    (`info.progress`, e.g. score / the game's max score), so a won game sums to 1.
    `final_score`: the env's final progress in [0, 1] on the last turn (e.g. the share of an
    SWE task's tests passing: the paper's "ratio verified" reward)."""
    lost_penalty: float = 0.0
    """Added on the last turn of a lost episode (e.g. -1); 0 makes loss and failure equal."""
    invalid_penalty: float = 0.0
    """Added on turns whose action was empty, not understood, or truncated (e.g. -0.1)."""
    turn_cost: float = 0.0
    """Subtracted on every turn (a push towards shorter episodes)."""


class SamplingSection(_Section):
    temperature: float = Field(0.7, ge=0.0)
    """Softmax temperature; 0 is greedy. The trainer's logprobs use the same temperature."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = Field(24, ge=1)
    """Tokens per action; a reply without the end-of-turn token ends the episode."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


class EvalSamplingSection(SamplingSection):
    temperature: float = Field(0.0, ge=0.0)
    """Evaluation is greedy unless asked otherwise (its own class, so that overriding one key
    of `rollout.eval` keeps this default instead of the training one)."""


class RolloutSection(_Section):
    games_per_iter: int = Field(4, ge=1)
    """Distinct training games per RL iteration."""
    group_size: int = Field(4, ge=1)
    """Episodes per game (different sampling seeds): the GRPO/RLOO group."""
    train_pool: int | None = Field(None, ge=1)
    """Distinct training games cycled through; None plays a new game every time."""
    batch_size: int = Field(16, ge=1)
    """Episodes played at once by the rollout engine."""
    env_timeout_s: float = Field(30.0, gt=0.0)
    """An env step or reset slower than this is an env error (the episode is excluded from
    the loss and counted)."""
    env_overlap_s: float | None = Field(None, ge=0.0)
    """Within a rollout, how long to wait for a turn's env steps before the episodes whose
    steps returned decode again without the rest (those rejoin when their steps return).
    None waits for every step: batches never depend on env timing, so runs repeat exactly.
    For slow, uneven steps that wait on something other than the cores decoding uses (a
    remote sandbox, I/O): e.g. 0.1. SWE test runs on the same 2 cores gained nothing
    (`benchmarks/env_overlap.py`, docs/performance.md)."""
    train: SamplingSection = Field(default_factory=SamplingSection)
    """Sampling for training rollouts."""
    eval: EvalSamplingSection = Field(default_factory=EvalSamplingSection)
    """Sampling for evaluation (greedy by default); never the training one."""
    truncated_action: Literal["end", "step"] = "end"
    """What a reply without the end-of-turn token does: end the episode (paper) or step."""
    restrict_actions: bool = False
    """Restrict every reply to exactly one of the env's admissible commands (envs that report
    them: TextWorld, ALFWorld), in training and evaluation: decoding is masked to a token
    trie of the commands, the recorded logprobs are the restricted distribution's and the
    trainer recomputes that same distribution (`policy/restrict.py`). A turn whose env lists
    no commands is sampled freely. Off: free generation (the paper's setting)."""
    avoid_repeats: bool = False
    """With `restrict_actions`: leave out of each turn's commands those the episode has
    already played from the state it is in (the same observation with the same progress),
    unless none would remain, in training and evaluation. A policy that does not remember
    where it has been, decoded greedily, turns a revisited state into a cycle it never
    leaves; this rule makes it take its next-best command there instead. The recorded
    allowed ids are those of the reduced set, so the trainer recomputes the distribution
    that was sampled. Reported apart from plain restricted decoding (`tripod eval
    --avoid-repeats`)."""
    env_ids: list[str] = Field(default_factory=list)
    """More env ids to train on besides `env.id` (a mix, e.g. `[textworld/w4-o6-q8]`): an
    iteration's groups take `env.id` and these in turn (group g plays env g mod n). They
    get their default options and the paper's turn cap (24 on w4-o6-q8)."""


class AlgoSection(_Section):
    estimator: str = "gae"
    """Advantage estimator: gae, gae_turn (critic), grpo, dr_grpo (GRPO without the division
    by the group std), rloo, reinforce_pp, gigpo (GRPO plus a step-level baseline over the
    group's turns taken from the same state)."""
    gamma: float = Field(1.0, ge=0.0, le=1.0)
    """Discount: per agent token for `gae`, per turn for `gae_turn` and `credit=turn`. The
    published recipe uses 1.0 (gamma < 1 hurt)."""
    lam: float = Field(1.0, ge=0.0, le=1.0)
    """GAE lambda: 1.0 is the Monte-Carlo return minus the value, 0.0 is TD(0)."""
    step_weight: float = Field(1.0, ge=0.0)
    """`gigpo` only: weight of the step-level advantage added to the episode-level one
    (GiGPO's omega; 0 gives GRPO)."""
    credit: Literal["episode", "turn"] = "episode"
    """Critic-free estimators: the score a turn's tokens get. `episode`: the episode's total
    reward, compared with its group's episode totals. `turn`: the turn's discounted
    return-to-go, compared with the returns-to-go at the same turn of its group."""
    whiten: bool = True
    """`gae`, `gae_turn`: whiten advantages over the batch's agent tokens."""
    lr: float = Field(1e-6, gt=0.0)
    """Actor learning rate (paper: 1e-6 for 1.5B models; small models need more)."""
    critic_lr: float = Field(1e-5, gt=0.0)
    """Critic learning rate (paper: 1e-5, ten times the actor's)."""
    critic: Literal["copy", "shared"] = "copy"
    """PPO critic: a value head on a separate copy of the policy, or on the policy's backbone."""
    clip_low: float = Field(0.2, ge=0.0)
    """PPO ratio clip below 1: the ratio is clipped to [1 - clip_low, 1 + clip_high]."""
    clip_high: float = Field(0.2, ge=0.0)
    """PPO ratio clip above 1 (raise it for DAPO-style clip-higher)."""
    dual_clip: float | None = None
    """Dual-clip bound c > 1 on negative-advantage tokens (None: off)."""
    value_clip: float | None = 0.2
    """Clip the critic's new values to old values +- this (None: no clipping)."""
    vf_coef: float = 0.5
    """Weight of the value loss (shared critic only; a copied critic has its own optimizer)."""
    kl_coef: float = 0.0
    """KL to the reference policy; 0 skips the reference forward pass."""
    kl_in: Literal["reward", "loss"] = "loss"
    """Put the KL penalty in the per-token reward (PPO paper recipe) or in the loss (GRPO)."""
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator (Schulman's k1 = log ratio, k2 = squared, k3 = unbiased low-variance)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (0: off; entropy is logged either way)."""
    loss_agg: Literal["token_mean", "seq_mean", "constant"] = "token_mean"
    """How per-token losses become one number: mean over the minibatch's agent tokens, mean
    of per-row means, or a sum over a constant normaliser (Dr.GRPO)."""
    epochs: int = Field(1, ge=1)
    """Passes over each rollout batch."""
    minibatch_size: int = Field(16, ge=1)
    """Rows per optimizer step."""
    micro_batch_size: int = Field(4, ge=1)
    """Rows per forward/backward (gradient accumulation inside a minibatch)."""
    grad_clip: float = Field(1.0, gt=0.0)
    """Clip the global gradient norm to this."""
    weight_decay: float = Field(0.0, ge=0.0)
    """AdamW weight decay of the actor."""
    uniform_outcomes: bool = True
    """Train on groups whose episodes all share one raw outcome (all won or all lost; on SWE
    tasks all resolved or none). False leaves them out of the update (DAPO's dynamic
    sampling, judged on the outcome rather than the shaped return: with dense or
    similarity rewards such a group's returns differ only by shaping)."""


class SFTSection(_Section):
    enabled: bool = False
    """Run SFT on expert demonstrations before RL."""
    games: int = Field(60, ge=1)
    """Expert demonstrations (one per `sft`-split game)."""
    recovery_games: int = 0
    """Extra demonstrations where random actions are injected and the expert recovers;
    only the expert's turns are trained on (teaches recovery from mistakes)."""
    recovery_noise: float = 0.3
    """Probability of a random admissible action per turn in recovery demonstrations."""
    epochs: int = Field(1, ge=0)
    """Passes over the demonstrations (the paper: 1). 0 skips this first SFT, for a DAgger
    round (`dagger_games`) started from a model that is already SFT'd (`model.name` a saved
    `sft/` checkpoint): the demonstrations are still collected, and trained on together with
    the DAgger episodes."""
    lr: float = Field(3e-5, gt=0.0)
    """SFT learning rate (AdamW)."""
    batch_size: int = Field(4, ge=1)
    """Demonstration rows per optimizer step."""
    micro_batch_size: int = Field(1, ge=1)
    """Rows per forward/backward pass, gradients accumulated over the step's rows (same
    update, float rounding aside). Activations grow with rows x tokens: a forward + backward
    of 2 rows x 1,024 tokens of SmolLM2-135M peaked at 4.5 GB resident (a benchmark since
    removed: docs/performance.md, "Tried and not kept"), and a 4-row SFT step of the
    quickstart at 8.9 GB."""
    max_turns: int | None = None
    """Turn cap for demonstrations of `env.id` (defaults to env.max_turns)."""
    dagger_games: int = Field(0, ge=0)
    """DAgger after SFT: this many more `sft` games of `env.id` are played with the SFT'd
    model replying on a share `dagger_share` of the turns (greedy, as evaluated; never
    imitated) and the expert on the rest, so the expert's turns start from states the model
    led to (its detours and loops). SFT then runs `dagger_epochs` more epochs over the
    demonstrations and these episodes together. 0: off."""
    dagger_share: float = Field(0.5, gt=0.0, lt=1.0)
    """Probability per turn that the model, not the expert, replies in a DAgger episode."""
    dagger_epochs: int = Field(1, ge=1)
    """Epochs over demonstrations + DAgger episodes after the DAgger games."""
    dagger_rounds: int = Field(1, ge=1)
    """DAgger rounds: each plays the same `dagger_games` with the model as the round before
    left it (its states differ as the model does), then runs `dagger_epochs` over the
    demonstrations and that round's episodes."""
    restricted_loss: bool = False
    """With `rollout.restrict_actions`: the NLL of each demonstration token under the
    restricted distribution the policy samples from (the softmax over the ids the admissible
    commands allow at that step), not over the whole vocabulary. The model is then trained
    only to choose among the commands, which is all restricted decoding asks of it; tokens
    that only one command allows carry no loss. Demonstration turns whose action is not
    admissible keep the full-vocabulary NLL."""
    heldout_games: int = Field(0, ge=0)
    """Expert demonstrations on the first N `valid` games of `env.id`, never trained on: before
    and after SFT the run reports the teacher-forced next-action accuracy on them (the share
    of expert turns the model would reply to with the expert's action; results.json
    `sft_heldout`). A minute of forward passes instead of a full evaluation, for tuning SFT.
    0: not measured."""
    env_ids: list[str] = Field(default_factory=list)
    """More env ids to take demonstrations from besides `env.id` (their `sft` split, the same
    numbers of expert and recovery games each, their default options and the paper's turn
    cap): e.g. `[textworld/w4-o6-q8]` to show the model larger games too."""
    env_options: dict[str, Any] = Field(default_factory=dict)
    """Env overrides for demonstrations only, on top of env.options (e.g. turn an expensive
    planner expert on for SFT and off for RL)."""


class EvalSection(_Section):
    env_ids: list[str] = Field(default_factory=list)
    """Env ids evaluated after training (held-out split); empty means just `env.id`. List
    harder variants here to measure generalisation (train simple, evaluate complex)."""
    split: Literal["train", "sft", "valid", "test"] = "test"
    """Game split for the held-out evaluation (tune on `valid`, report on `test`)."""
    games: int = Field(20, ge=1)
    """Games per env id (one greedy episode each)."""
    games_by_env: dict[str, int] = Field(default_factory=dict)
    """Games for the env ids that differ from `games` (e.g. `{textworld/w4-o6-q8: 100}`:
    longer games, fewer of them)."""
    max_turns: int | None = None
    """Turn cap for every evaluated env id. None: `env.max_turns` for the training env and the
    paper's cap for other env ids (3x the quest length for custom TextWorld games, 24 for
    tw-simple and ALFWorld, 40 tool calls for SWE), as `tripod eval` does."""
    before_training: bool = True
    """Also evaluate the starting model (and the SFT model), for a before/after table."""
    before_dagger: bool = False
    """With `sft.dagger_games`, also evaluate the SFT model before its DAgger round (stage
    `sft-before-dagger`), on the same games: the round's effect, without evaluating the
    base model as `before_training` does."""
    batch_size: int | None = Field(None, ge=1)
    """Episodes an evaluation plays at once; None: `rollout.batch_size`. Each holds a KV-cache
    slot (46 KB per position for SmolLM2): lower it for long evaluation games on little
    memory, raise it where a decode step of more rows costs little more (a GPU). On 2 CPU
    cores the quickstart's 20 test games at once ran 13% fewer decode steps than 16 + 4, in
    0.91-1.07x the wall time (median 0.98; docs/performance.md, "Tried and not kept")."""


class TrainSection(_Section):
    iterations: int = Field(10, ge=0)
    """RL iterations (collect, reward, advantage, update)."""
    eval_every: int = Field(0, ge=0)
    """Evaluate on the valid split every k iterations (0: never during training)."""
    eval_games: int = Field(20, ge=1)
    """Games per evaluation (one greedy episode each)."""
    checkpoint_every: int = Field(0, ge=0)
    """Save a resumable checkpoint every k iterations (0: only at the end)."""
    tensorboard: bool = True
    """Also write TensorBoard event files next to metrics.jsonl."""
    trajectory_groups: int = Field(2, ge=-1)
    """Groups of each iteration's episodes saved token by token under
    `RUN_DIR/trajectories/` for `tripod report` / `tripod inspect` (-1: all, 0: none)."""
    budget_min: float | None = Field(None, gt=0)
    """Wall-clock budget in minutes, counted from when the run's games exist (demonstrations,
    SFT and RL count; game generation and the final evaluation do not): RL stops early at
    the first iteration after which one more, as long as the last, would pass it. None: run
    `iterations` whatever the time."""
    snapshots_min: list[float] = Field(default_factory=list)
    """Minutes (on the same clock) at which to keep the policy: each gets the policy as it
    was at the last boundary (start, end of SFT, end of an RL iteration) at or before that
    minute, saved as a checkpoint under `RUN_DIR/snapshots/Mmin` (`tripod eval` reads it)."""

    @field_validator("snapshots_min")
    @classmethod
    def _positive_minutes(cls, v: list[float]) -> list[float]:
        if any(m <= 0 for m in v):
            raise ValueError(f"snapshot minutes must be > 0, got {v}")
        return sorted(set(v))


class ClusterSection(_Section):
    backend: Literal["local", "ray"] = "local"
    """Where envs step: `local` (threads and child processes of this process) or `ray`
    (Ray actors; needs `pip install tripod[ray]`). Results are equal for equal seeds."""
    address: str | None = None
    """Ray only: a cluster to join (`auto`: the one `ray start` set up on this machine);
    None starts a private local Ray with `num_cpus` CPUs."""
    num_cpus: int | None = Field(None, ge=1)
    """Ray only: CPUs of the private local Ray (None: all of this machine's)."""
    env_workers: int = Field(2, ge=1)
    """Ray only: env worker actors (one CPU each); each hosts several envs and steps them
    one at a time, so this is how many env steps run at once."""
    fsdp: bool = False
    """Under torchrun: shard the decoder layers with FSDP2 instead of replicating the whole
    model on every rank (DDP-style). For models that do not fit one device; not with LoRA
    yet."""
    overlap: bool = False
    """Collect iteration k+1 (in a thread, with a copy of the policy one update behind)
    while iteration k trains; the PPO ratio uses the recorded behaviour logprobs, the
    staleness (0 or 1 update) is logged. One process only, for now."""
    rollout_workers: int = Field(0, ge=0)
    """Ray only: actors (one CPU each) that play the training episodes, each holding a CPU
    copy of the policy built from `model` and its own envs; worker w plays groups w, w + N,
    ... and the learner broadcasts its weights after every update. 0: the learner's process
    plays them. Evaluation stays in the learner's process. One process only (not under
    torchrun)."""

    @model_validator(mode="after")
    def _check_rollout_workers(self) -> ClusterSection:
        if self.rollout_workers and self.backend != "ray":
            raise ValueError("cluster.rollout_workers needs cluster.backend=ray")
        return self


class TrainConfig(_Section):
    """A whole recipe."""

    run: RunSection = Field(default_factory=RunSection)
    """Run name, output folder and seed."""
    model: ModelSection = Field(default_factory=ModelSection)
    """The policy model and how it is trained (full or LoRA)."""
    env: EnvSection = Field(default_factory=EnvSection)
    """The training environment."""
    prompt: PromptSection = Field(default_factory=PromptSection)
    """How the chat shown to the model is built."""
    reward: RewardSection = Field(default_factory=RewardSection)
    """How episode outcomes become per-turn rewards (the reward pillar)."""
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    """How episodes are collected: games, groups, batching, sampling."""
    algo: AlgoSection = Field(default_factory=AlgoSection)
    """Advantage estimator, losses and optimisation of the RL update."""
    sft: SFTSection = Field(default_factory=SFTSection)
    """Optional SFT on expert demonstrations before RL."""
    train: TrainSection = Field(default_factory=TrainSection)
    """The RL loop: iterations, periodic evaluation, checkpoints."""
    eval: EvalSection = Field(default_factory=EvalSection)
    """Held-out evaluation after training (and before, for a before/after table)."""
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    """Scale-out: where envs step (local or Ray) and how torchrun ranks hold the model."""

    @model_validator(mode="after")
    def _check_algorithm(self) -> TrainConfig:
        if self.algo.estimator not in ESTIMATORS:
            valid = ", ".join(sorted(ESTIMATORS))
            raise ValueError(f"algo.estimator: unknown {self.algo.estimator!r}; valid: {valid}")
        spec = ESTIMATORS[self.algo.estimator]
        if self.rollout.group_size < spec.min_group_size:
            raise ValueError(
                f"rollout.group_size: {self.algo.estimator} needs groups of at least "
                f"{spec.min_group_size} episodes of the same game (got {self.rollout.group_size});"
                " a group of 1 has no baseline")
        return self

    @model_validator(mode="after")
    def _check_sft_epochs(self) -> TrainConfig:
        if self.sft.enabled and self.sft.epochs == 0 and self.sft.dagger_games == 0:
            raise ValueError("sft.epochs=0 skips SFT on the demonstrations, which only a DAgger "
                             "round needs (sft.dagger_games > 0); to skip SFT, set "
                             "sft.enabled=false")
        return self

    @model_validator(mode="after")
    def _check_avoid_repeats(self) -> TrainConfig:
        if self.rollout.avoid_repeats and not self.rollout.restrict_actions:
            raise ValueError("rollout.avoid_repeats needs rollout.restrict_actions=true (it "
                             "leaves commands out of the admissible set the replies are "
                             "restricted to)")
        return self

    @model_validator(mode="after")
    def _check_restricted_loss(self) -> TrainConfig:
        if self.sft.restricted_loss and not self.rollout.restrict_actions:
            raise ValueError("sft.restricted_loss needs rollout.restrict_actions=true (the "
                             "demonstrations record the allowed ids only then)")
        return self

    @model_validator(mode="after")
    def _check_eval_games(self) -> TrainConfig:
        evaluated = self.eval_env_ids()
        for env_id, games in self.eval.games_by_env.items():
            if env_id not in evaluated:
                raise ValueError(f"eval.games_by_env: {env_id!r} is not evaluated "
                                 f"(eval.env_ids: {evaluated})")
            if games < 1:
                raise ValueError(f"eval.games_by_env: {env_id!r} needs at least 1 game")
        return self

    @model_validator(mode="after")
    def _check_options_by_env(self) -> TrainConfig:
        others = {*self.rollout.env_ids, *self.sft.env_ids, *self.eval_env_ids()} - {self.env.id}
        for env_id in self.env.options_by_env:
            if env_id == self.env.id:
                raise ValueError(f"env.options_by_env: {env_id!r} is env.id; its options go in "
                                 "env.options")
            if env_id not in others:
                raise ValueError(f"env.options_by_env: {env_id!r} is not played by this run "
                                 f"(its other env ids: {sorted(others)})")
        return self

    def eval_env_ids(self) -> list[str]:
        """The env ids evaluated after training (`eval.env_ids`, else `env.id`)."""
        return self.eval.env_ids or [self.env.id]

    def eval_batch_size(self) -> int:
        """Episodes an evaluation plays at once (`eval.batch_size`, else `rollout.batch_size`)."""
        return self.eval.batch_size or self.rollout.batch_size

    def eval_games(self, env_id: str) -> int:
        """Held-out games for one evaluated env id (`eval.games_by_env`, else `eval.games`)."""
        return self.eval.games_by_env.get(env_id, self.eval.games)

    @property
    def run_dir(self) -> Path:
        return Path(self.run.out_dir) / self.run.name


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the offending key."""


def set_dotted(data: dict[str, Any], dotted: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with each ``section.key`` set to its value, in order.

    A value replaces what the key held, a mapping too (``eval.games_by_env={}`` clears the
    recipe's entries); the sections on the way keep their other keys.
    """
    out = dict(data)
    for key, value in dotted.items():
        node = out
        *parents, last = key.strip().split(".")
        for part in parents:
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"{key}: {part!r} is not a section")
            node[part] = node = dict(child)
        node[last] = value
    return out


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["algo.lr=1e-5", "env.id=textworld/w4-o6-q8"]`` -> ``{"algo.lr": 1e-05, ...}``
    (YAML values; a later override of the same key wins)."""
    data: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: the value is not valid YAML "
                              f"({str(exc).splitlines()[0]})") from None
        data.pop(key.strip(), None)
        data[key.strip()] = value
    return data


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None) -> TrainConfig:
    """Load a recipe (YAML), apply dotted overrides, validate. Errors name the key."""
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not a YAML recipe ({str(exc).splitlines()[0]})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a recipe must be a mapping of sections")
        data = _merge(data, loaded)
    data = set_dotted(data, parse_overrides(overrides or []))
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, path)) from None


def _describe(exc: ValidationError, path: str | Path | None) -> str:
    where = f"{path}: " if path else ""
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(recipe)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{where}{key}: {msg}")
    return "invalid config:\n  " + "\n  ".join(lines)


def dump_config(cfg: TrainConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


# -- what a run plays with: recipe-to-settings rules shared by training and `tripod eval` ----


def default_max_turns(env_id: str) -> int:
    """The paper's turn caps (arXiv 2510.01132): 12 for w2-o3-q4 and 24 for w4-o6-q8, i.e. three
    times the quest length for custom TextWorld games; 24 for tw-simple and ALFWorld; 40
    tool calls for SWE tasks."""
    if m := re.fullmatch(r"textworld/w\d+-o\d+-q(\d+)", env_id):
        return 3 * int(m.group(1))
    if env_id.startswith("swe"):
        return 40
    return 24


def env_options(cfg: TrainConfig, env_id: str) -> dict:
    """The options an env id plays with in this run: `env.options` for the recipe's env,
    `env.options_by_env` for the others (their defaults where it names none)."""
    if env_id == cfg.env.id:
        return dict(cfg.env.options)
    return dict(cfg.env.options_by_env.get(env_id, {}))


def other_env_ids(cfg: TrainConfig) -> list[str]:
    """The env ids a run plays besides `env.id`: its RL and demonstration mixes and its other
    evaluated envs."""
    played = [*cfg.rollout.env_ids, *cfg.sft.env_ids, *cfg.eval_env_ids()]
    return [e for e in dict.fromkeys(played) if e != cfg.env.id]


def own_env_first(cfg: TrainConfig, more: list[str]) -> list[str]:
    """`env.id`, then the other env ids of a mix (`sft.env_ids`, `rollout.env_ids`)."""
    return [cfg.env.id, *(e for e in more if e != cfg.env.id)]


def turn_cap(cfg: TrainConfig, env_id: str) -> int:
    """The turn cap of `env_id` in this run: the recipe's `env.max_turns` for its own env,
    the paper's cap (`default_max_turns`) for any other (mixes, evaluations)."""
    return cfg.env.max_turns if env_id == cfg.env.id else default_max_turns(env_id)


def eval_turn_cap(cfg: TrainConfig, env_id: str) -> int:
    """The turn cap an evaluation of `env_id` uses, one rule for `tripod train`'s evaluations
    and `tripod eval`: `eval.max_turns` if the recipe sets it; else the recipe's own cap for
    its training env, and the paper's cap for any other env id (a w2-o3-q4 recipe evaluated
    on w4-o6-q8 plays 24 turns there, not its own 12)."""
    return cfg.eval.max_turns or turn_cap(cfg, env_id)


RECIPE_FILE = "recipe.yaml"
"""The recipe a saved model was trained with, next to its weights (`tripod eval` reads it)."""


def write_recipe(folder: Path, cfg: TrainConfig) -> None:
    (Path(folder) / RECIPE_FILE).write_text(dump_config(cfg))


def read_recipe(folder: str | Path) -> TrainConfig | None:
    """The recipe saved with a model folder or checkpoint; None if it has none."""
    folder = Path(folder)
    if (folder / RECIPE_FILE).is_file():
        return TrainConfig.model_validate(yaml.safe_load((folder / RECIPE_FILE).read_text()))
    state = folder / "state.json"
    if state.is_file() and "config" in (data := json.loads(state.read_text())):
        return TrainConfig.model_validate(data["config"])
    return None
