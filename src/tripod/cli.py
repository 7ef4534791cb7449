"""`tripod` command line: envs, play, rollout, quickstart, sft, train, sweep, eval, report,
inspect, results, study, budget, doctor."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

import yaml

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _recipe(path: str) -> Path:
    p = Path(path)
    if not p.exists() and (RECIPES / path).exists():
        return RECIPES / path
    if not p.exists():
        raise SystemExit(f"recipe not found: {path}")
    return p


def cmd_envs(args: argparse.Namespace) -> int:
    from tripod.envs.registry import families, unavailable_families

    for fam in families():
        print(f"{fam.pattern:<42} {fam.description}")
        print(f"{'':<42} e.g. {', '.join(fam.examples)}")
    for mod, why in unavailable_families().items():
        print(f"(unavailable: {mod}: {why})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Whether the SWE sandbox works on this machine (exit status 1 with the reasons if not):
    the sandbox probe, then a one-test suite run the way a pristine suite is, then the
    cached default suite, if any."""
    from tripod.envs.swe.generator import cached_suite_state, pristine_run_problem
    from tripod.envs.swe.sandbox import sandbox_report

    report = sandbox_report()
    problems = report.problems()
    if not problems and (why := pristine_run_problem()):
        problems.append(why)
    caps = ", ".join(report.run_caps) or "none"
    print(f"swe sandbox: {'works' if not problems else 'DOES NOT WORK'} (namespaces "
          f"{report.namespaces}, process limit {report.process_limit}, run caps {caps})")
    for why in problems:
        print("  - " + why.replace("\n", "\n    "))
    print(f"swe suite cache: {cached_suite_state()}")
    return 1 if problems else 0


def cmd_play(args: argparse.Namespace) -> int:
    from tripod.envs.play import play

    summary = play(args.env_id, args.policy, args.episodes, seed=args.seed, split=args.split,
                   max_turns=args.max_turns, print_fn=(lambda *a, **k: None) if args.json
                   and args.policy != "human" else print, **_env_options(args.option))
    if args.json:
        print(json.dumps(summary.to_json()))
    else:
        print(f"won {summary.won}/{summary.episodes} ({summary.success_rate:.0%})")
    return 0


def _env_options(pairs: list[str]) -> dict:
    """`--option KEY=VALUE` pairs as env options (each VALUE read as YAML: `true`, `3`,
    `[a, b]`)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--option needs KEY=VALUE, got {pair!r}")
        options[key] = yaml.safe_load(value)
    return options


def cmd_rollout(args: argparse.Namespace) -> int:
    from tripod.eval.evaluate import summarise
    from tripod.policy import load_policy
    from tripod.policy.chat import PromptConfig
    from tripod.policy.rollout import RolloutConfig, RolloutEngine, make_jobs
    from tripod.policy.sampler import SamplingParams

    policy = load_policy(args.model)
    cfg = RolloutConfig(max_turns=args.max_turns, batch_size=args.batch_size,
                        prompt=PromptConfig(history_window=args.history_window))
    jobs = make_jobs(args.env, args.split, list(range(args.episodes)), 1, args.seed)
    engine = RolloutEngine(policy, cfg)
    trajs, stats = engine.collect(jobs, SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens))
    engine.close()
    if args.out:
        from tripod.report.records import write_trajectories

        write_trajectories(args.out, trajs, policy.tokenizer, 0, source="rollout")
    res = summarise(trajs, args.env, args.split, stats.seconds)
    out = {"episodes": res.episodes, "won": res.won, "success_rate": res.success_rate,
           "env_steps": stats.env_steps, "generated_tokens": stats.generated_tokens,
           "episodes_per_s": stats.episodes_per_s, "tokens_per_s": stats.tokens_per_s}
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


def cmd_quickstart(args: argparse.Namespace) -> int:
    from tripod.core.config import load_config
    from tripod.train.pipeline import run_recipe

    cfg = load_config(_recipe("quickstart.yaml"), args.overrides)
    run_recipe(cfg)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from tripod.core.config import load_config
    from tripod.policy import load_policy
    from tripod.train.common import prepare_run_dir
    from tripod.train.sft import collect_demonstrations, demo_rows, train_sft

    cfg = load_config(_recipe(args.recipe), args.overrides)
    run_dir = prepare_run_dir(cfg)
    policy = load_policy(cfg.model.name, device=cfg.model.device, seed=cfg.run.seed)
    demos = collect_demonstrations(policy, cfg)
    res = train_sft(policy, demo_rows(demos), cfg, out_dir=run_dir / "sft")
    print(f"SFT on {len(demos)} demonstrations: final loss {res.final_loss:.3f}; "
          f"model saved to {run_dir / 'sft'}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from tripod.core.config import load_config
    from tripod.train.pipeline import run_recipe

    cfg = load_config(_recipe(args.recipe), args.overrides)
    try:
        run_recipe(cfg, resume=Path(args.resume) if args.resume else None)
    except KeyboardInterrupt:
        print(f"\ninterrupted; {_resume_hint(args.recipe, cfg.run_dir)}", file=sys.stderr)
        return 130
    return 0


def _resume_hint(recipe: str, run_dir: Path) -> str:
    """What an interrupted run leaves: how to resume it, or that nothing can be resumed."""
    ckpts = sorted((run_dir / "checkpoints").glob("iter_*"))
    if not ckpts:
        return (f"{run_dir} holds no checkpoint yet (they are written every "
                "train.checkpoint_every RL iterations): start the run again to redo it")
    return (f"the last checkpoint is {ckpts[-1]}; continue with `tripod train {recipe} "
            f"--resume {run_dir}`")


def cmd_sweep(args: argparse.Namespace) -> int:
    from tripod.studies.sweep import run_sweep

    run_sweep(_recipe(args.recipe), args.grid)
    return 0


def eval_settings(args: argparse.Namespace):
    """Evaluate what was trained: the checkpoint's recipe gives the prompt, env options, turn
    cap and evaluation sampling; a flag given on the command line overrides its setting."""
    from tripod.core.config import (
        TrainConfig,
        default_max_turns,
        env_options,
        eval_turn_cap,
        read_recipe,
    )
    from tripod.policy.settings import rollout_config

    recipe = read_recipe(args.checkpoint) if Path(args.checkpoint).is_dir() else None
    cfg = recipe or TrainConfig()
    sampling = cfg.rollout.eval.model_copy(update={
        k: v for k, v in (("temperature", args.temperature),
                          ("max_new_tokens", args.max_new_tokens)) if v is not None})
    turns = args.max_turns or (eval_turn_cap(cfg, args.env) if recipe is not None
                               else default_max_turns(args.env))
    rcfg = rollout_config(cfg, max_turns=turns,
                          batch_size=args.batch_size or cfg.eval_batch_size())
    rcfg.env_options = {**(env_options(cfg, args.env) if recipe is not None else {}),
                        **_env_options(getattr(args, "option", []))}
    if getattr(args, "restrict", None) is not None:
        rcfg.restrict_actions = args.restrict
    if getattr(args, "avoid_repeats", None) is not None:
        rcfg.avoid_repeats = args.avoid_repeats
    if rcfg.avoid_repeats and not rcfg.restrict_actions:
        raise SystemExit("--avoid-repeats needs restricted replies (--restrict)")
    source = f"recipe saved with {args.checkpoint}" if recipe else "tripod defaults (no recipe)"
    print(f"evaluating with {source}: temperature {sampling.temperature}, max_new_tokens "
          f"{sampling.max_new_tokens}, max_turns {turns}, history_window "
          f"{rcfg.prompt.history_window}, env options {rcfg.env_options}, replies restricted "
          f"to admissible commands: {rcfg.restrict_actions}, repeats avoided: "
          f"{rcfg.avoid_repeats}", file=sys.stderr)
    return sampling, rcfg


def cmd_eval(args: argparse.Namespace) -> int:
    from tripod.core.provenance import collect
    from tripod.eval.evaluate import evaluate
    from tripod.policy import load_policy

    if args.imitation:
        return _imitation(args)
    sampling, rcfg = eval_settings(args)
    record = collect() if args.json else None   # the machine before the evaluation loads it
    policy = load_policy(args.checkpoint)
    res, _ = evaluate(policy, args.env, args.split, args.episodes, sampling, rcfg,
                      seed=args.seed)
    if record is not None:
        out = res.to_json()
        out.pop("per_game")
        print(json.dumps({**out, "provenance": record.to_dict()}))
    else:
        print(res.summary())
    return 0


def _imitation(args: argparse.Namespace) -> int:
    """`tripod eval --imitation`: teacher-forced next-action accuracy on the expert's
    demonstrations of the games, played with the checkpoint recipe's demonstration options
    (`sft.env_options`) and reply restriction."""
    from tripod.core.config import TrainConfig, env_options, read_recipe
    from tripod.core.provenance import collect
    from tripod.policy import load_policy
    from tripod.train.sft import action_accuracy, expert_demonstrations

    recipe = read_recipe(args.checkpoint) if Path(args.checkpoint).is_dir() else None
    cfg = recipe or TrainConfig()
    record = collect() if args.json else None
    policy = load_policy(args.checkpoint)
    options = {**env_options(cfg, args.env), **cfg.sft.env_options,
               **_env_options(args.option)}
    demos = expert_demonstrations(policy, cfg, args.env, args.split, args.episodes,
                                  max_turns=args.max_turns, options=options)
    acc = action_accuracy(policy, demos, cfg.rollout.restrict_actions)
    if record is not None:
        print(json.dumps({"env_id": args.env, "split": args.split, "games": args.episodes,
                          "demonstrations": len(demos), **acc.to_json(),
                          "provenance": record.to_dict()}))
    else:
        print(f"next-action accuracy {acc.rate:.1%} ({acc.correct}/{acc.turns} expert turns of "
              f"{len(demos)} won demonstrations; {acc.off_list} not admissible) on {args.env} "
              f"[{args.split}]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tripod", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    _add_env_commands(sub)
    _add_training_commands(sub)
    _add_eval_command(sub)
    from tripod.report.commands import add_inspect_parser, add_report_parser
    from tripod.report.results import add_results_parser

    add_report_parser(sub)
    add_inspect_parser(sub)
    add_results_parser(sub)
    from tripod.studies.study import register_study_commands

    register_study_commands(sub)
    return p


def _add_env_commands(sub: argparse._SubParsersAction) -> None:
    envs = sub.add_parser("envs", help="list environments")
    envs.add_argument("action", choices=["list"])
    envs.set_defaults(fn=cmd_envs)
    doctor = sub.add_parser("doctor", help="check that the SWE sandbox works on this machine")
    doctor.set_defaults(fn=cmd_doctor)

    play = sub.add_parser("play", help="play an env with a scripted or human policy")
    play.add_argument("env_id")
    play.add_argument("--policy", choices=["expert", "random", "human"], default="expert")
    play.add_argument("--episodes", type=int, default=1)
    play.add_argument("--seed", type=int, default=0)
    play.add_argument("--split", default="test")
    play.add_argument("--max-turns", type=int, default=None)
    play.add_argument("--json", action="store_true")
    play.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                      help="an env option (repeatable), e.g. --option expert_type=handcoded")
    play.set_defaults(fn=cmd_play)

    ro = sub.add_parser("rollout", help="play episodes with a model")
    ro.add_argument("--model", default="smollm2-135m")
    ro.add_argument("--env", default="textworld/w2-o3-q4")
    ro.add_argument("--episodes", type=int, default=4)
    ro.add_argument("--split", default="test")
    ro.add_argument("--seed", type=int, default=0)
    ro.add_argument("--temperature", type=float, default=0.7)
    ro.add_argument("--max-new-tokens", type=int, default=24)
    ro.add_argument("--max-turns", type=int, default=12)
    ro.add_argument("--batch-size", type=int, default=16)
    ro.add_argument("--history-window", type=int, default=None)
    ro.add_argument("--out", help="write the episodes, token by token, to this trajectory "
                    "file (.jsonl or .jsonl.gz; see docs/report.md)")
    ro.add_argument("--json", action="store_true")
    ro.set_defaults(fn=cmd_rollout)


def _add_training_commands(sub: argparse._SubParsersAction) -> None:
    qs = sub.add_parser("quickstart", help="SFT + RL of SmolLM2 on TextWorld, then evaluation")
    qs.add_argument("overrides", nargs="*", help="dotted overrides, e.g. train.iterations=2")
    qs.set_defaults(fn=cmd_quickstart)

    for name, fn, hlp in (("sft", cmd_sft, "SFT on expert demonstrations"),
                          ("train", cmd_train, "RL training from a recipe")):
        sp = sub.add_parser(name, help=hlp)
        sp.add_argument("recipe")
        sp.add_argument("overrides", nargs="*")
        if name == "train":
            sp.add_argument("--resume", help="checkpoint folder, or run folder (its newest "
                            "checkpoint that verifies), to resume from")
        sp.set_defaults(fn=fn)

    sw = sub.add_parser("sweep", help="run a recipe over a grid of settings (one study)")
    sw.add_argument("recipe")
    sw.add_argument("grid", nargs="*", help="key=v1,v2 items, e.g. algo.estimator=gae,grpo,rloo")
    sw.set_defaults(fn=cmd_sweep)


def _add_eval_command(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="success rate of a checkpoint on held-out games")
    ev.add_argument("--checkpoint", required=True, help="model folder, smollm2-135m or tiny")
    ev.add_argument("--env", required=True)
    ev.add_argument("--split", default="test")
    ev.add_argument("--episodes", type=int, default=20)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--temperature", type=float, default=None,
                    help="default: the checkpoint recipe's rollout.eval (greedy)")
    ev.add_argument("--max-new-tokens", type=int, default=None,
                    help="default: the checkpoint recipe's rollout.eval.max_new_tokens")
    ev.add_argument("--max-turns", type=int, default=None,
                    help="default: the recipe's turn cap for its own env, else the paper's cap")
    ev.add_argument("--batch-size", type=int, default=None,
                    help="episodes at once; default: the checkpoint recipe's eval.batch_size "
                         "(else its rollout.batch_size; 16 without a recipe)")
    ev.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an env option over the recipe's (repeatable), e.g. --option "
                         "held_out=function")
    ev.add_argument("--restrict", action=argparse.BooleanOptionalAction, default=None,
                    help="replies restricted to the env's admissible commands, or not "
                         "(--no-restrict); default: the checkpoint recipe's "
                         "rollout.restrict_actions")
    ev.add_argument("--avoid-repeats", action=argparse.BooleanOptionalAction, default=None,
                    help="with restricted replies, leave out the commands an episode has "
                         "already played from its current state (rollout.avoid_repeats); "
                         "default: the checkpoint recipe's")
    ev.add_argument("--imitation", action="store_true",
                    help="instead of playing: teacher-forced next-action accuracy on the "
                    "expert's demonstrations of the games (the recipe's sft.env_options)")
    ev.add_argument("--json", action="store_true",
                    help="one JSON object: the result and its provenance (commit, machine)")
    ev.set_defaults(fn=cmd_eval)


def _run_stopped(exc: BaseException) -> bool:
    """Whether `exc` is an error with which a run stops itself and says why. Those classes live
    in modules that import torch; one not yet imported raised nothing, so the check never
    imports them (`tripod --help` and `tripod doctor` stay fast)."""
    kinds = tuple(kind for module, name in (("tripod.train.learner", "TrainingStopped"),
                                            ("tripod.train.sft", "NoDemonstrationsError"))
                  if (kind := getattr(sys.modules.get(module), name, None)) is not None)
    return bool(kinds) and isinstance(exc, kinds)


def main(argv: list[str] | None = None) -> int:
    if argv is None:   # the `tripod` command itself (not a call from Python): may re-exec
        from tripod.core.allocator import reexec_if_asked

        reexec_if_asked(sys.argv[1:])
    args = build_parser().parse_args(argv)
    from tripod.core.config import ConfigError
    from tripod.envs.registry import UnknownEnvError

    try:
        return args.fn(args)
    except KeyboardInterrupt:   # `train` says where to resume; sweeps and studies skip done runs
        again = (" (running it again skips the finished runs)"
                 if args.command in ("sweep", "study") else "")
        print(f"\ninterrupted{again}", file=sys.stderr)
        return 130
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UnknownEnvError as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = exc.filename or "a run file"
        print(f"error: disk full while writing {where}; the last checkpoint is intact: free "
              f"space, then resume with --resume RUN_DIR", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _run_stopped(exc):
            raise
        print(f"error: {exc}", file=sys.stderr)  # the run stopped itself and says why
        return 1


if __name__ == "__main__":
    sys.exit(main())
