"""CLI: ``python -m ray_efa_eks.training`` trains locally (or on --address); ``submit`` sends it to a RayCluster.

Examples:
    python -m ray_efa_eks.training --json                      # local 2-node CPU cluster, tiny model
    python -m ray_efa_eks.training --address auto --use-gpu --workers 8 --preset 1b
    kubectl port-forward svc/<head-svc> 8265 &
    python -m ray_efa_eks.training submit --address http://127.0.0.1:8265 -- --use-gpu --workers 8
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from typing import Optional, Sequence


def _train_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=None, help="existing Ray cluster (e.g. 'auto'); omit for local")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--storage-path", default=None,
                   help="checkpoint storage, a directory or s3://bucket/prefix "
                        "(default: $RAY_EFA_EKS_STORAGE_PATH, else <tmp>/ray-efa-eks-train)")
    p.add_argument("--name", default=None,
                   help="the run name; rerun with the same name and storage path to resume "
                        "(default: a new fsdp-lm-<time> run)")
    p.add_argument("--max-failures", type=int, default=1)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--report-every", type=int, default=5)
    p.add_argument("--fail-at-step", type=int, default=None,
                   help="fault injection: rank 1 is killed at this step unless the attempt resumed "
                        "(must come after the first checkpoint)")
    p.add_argument("--use-gpu", action="store_true")
    p.add_argument("--json", action="store_true", help="last stdout line is a JSON summary")


def run_training(args: argparse.Namespace) -> dict:
    from .trainer import build_trainer, resolve_storage_path

    storage = resolve_storage_path(args.storage_path, os.environ)
    name = args.name or f"fsdp-lm-{int(time.time())}"
    train_cfg = {
        "preset": args.preset,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "checkpoint_every": args.checkpoint_every,
        "report_every": args.report_every,
        "fail_at_step": args.fail_at_step,
    }
    trainer = build_trainer(num_workers=args.workers, use_gpu=args.use_gpu, train_config=train_cfg,
                            storage_path=storage, name=name, max_failures=args.max_failures)
    t0 = time.perf_counter()
    result = trainer.fit()  # raises TrainingFailedError once max_failures is spent
    wall = time.perf_counter() - t0
    m = result.return_value  # rank 0's last metrics (Result.metrics only holds checkpointed ones)
    return {
        "steps": m["step"],
        "loss_first": m["loss_first"],
        "loss_last": m["loss"],
        "world_size": m["world_size"],
        "nodes": len({n["node_id"] for n in m["nodes"]}),
        "tokens_per_s": m["steady_global_tokens_per_s"],
        "resumed_from_step": m["resumed_from_step"],
        "shard_fraction": m["shard_fraction"],
        "backend": m["backend"],
        "name": name,
        "storage_path": storage,
        "checkpoint": result.checkpoint.path if result.checkpoint else None,
        "fit_s": round(wall, 2),
    }


def main_train(args: argparse.Namespace) -> int:
    import ray

    if args.fail_at_step is not None and not 0 < args.checkpoint_every < args.fail_at_step:
        raise SystemExit("--fail-at-step must come after the first checkpoint (--checkpoint-every)")
    t0 = time.perf_counter()
    if args.address:
        ray.init(address=args.address)
        summary = run_training(args)
    else:
        from .local_cluster import local_cluster

        with local_cluster(worker_nodes=args.workers):
            summary = run_training(args)
    summary["wall_s"] = round(time.perf_counter() - t0, 2)
    print(f"[summary] steps={summary['steps']} loss {summary['loss_first']:.4f} -> {summary['loss_last']:.4f} "
          f"world={summary['world_size']} nodes={summary['nodes']} tok/s={summary['tokens_per_s']:.0f} "
          f"resumed_from={summary['resumed_from_step']} wall={summary['wall_s']}s", flush=True)
    if args.json:
        print(json.dumps(summary), flush=True)
    return 0


def submit_entrypoint(train_args: Sequence[str]) -> str:
    """The job's command: the training args pass through unchanged; with no --storage-path the
    job uses the cluster's $RAY_EFA_EKS_STORAGE_PATH (set on the pods)."""
    return shlex.join(["python", "-m", "training", "--address", "auto", *train_args])


def main_submit(args: argparse.Namespace, rest: Sequence[str]) -> int:
    from ray.job_submission import JobSubmissionClient

    pkg_dir = os.path.dirname(os.path.abspath(__file__))
    env = {"working_dir": os.path.dirname(pkg_dir), "excludes": [".venv", ".git", "tests", "benchmarks"]}
    if args.pip:
        env["pip"] = list(args.pip)
    if args.env:
        env["env_vars"] = dict(kv.split("=", 1) for kv in args.env)
    entry = submit_entrypoint(rest)
    client = JobSubmissionClient(args.address)
    job_id = client.submit_job(entrypoint=entry, runtime_env=env)
    print(f"submitted {job_id}: {entry}", flush=True)
    if args.no_wait:
        return 0
    for line in client.tail_job_logs(job_id) if hasattr(client, "tail_job_logs") else []:
        print(line, end="")
    status = client.get_job_status(job_id)
    print(f"job {job_id}: {status}")
    return 0 if str(status).endswith("SUCCEEDED") else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "submit":
        p = argparse.ArgumentParser(prog="python -m ray_efa_eks.training submit")
        p.add_argument("--address", default="http://127.0.0.1:8265")
        p.add_argument("--pip", action="append", default=[])
        p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the job's env")
        p.add_argument("--no-wait", action="store_true")
        rest = argv[1:]
        if "--" in rest:
            i = rest.index("--")
            own, train = rest[:i], rest[i + 1:]
        else:
            own, train = rest, []
        return main_submit(p.parse_args(own), train)
    p = argparse.ArgumentParser(prog="python -m ray_efa_eks.training")
    _train_args(p)
    return main_train(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
