"""The gate Job's steps around the check, run by its shell script (components/addons/efa_check.py ``check_script``) as
``python -m ray_efa_eks.efacheck.gate_steps STEP ...`` from the payload the Job mounts (its working directory).

    stop-earlier ADDRESS              stop every earlier efa-check-* Ray job still pending or running: a check
                                      orphaned by an earlier Job pod (SIGKILL) must not hold the GPUs
    read-digest FILE                  the Ray job's runtime env JSON carrying the image audit's digest (the check's
                                      default ``--image-digest``); prints nothing when the audit has none
    audit-ready FILE AFTER            exit 0 once the audit file holds a pass taken at or after AFTER (a file
                                      without ``at``: a one-shot verdict)
    combine FILE AFTER CHECK          the audit's verdict over every Ray pod it saw, combined with the check's exit
                                      code CHECK: a failed check keeps its own code; a passed one takes the audit's
                                      (1 mixed fleet, 2 no verdict, or none taken after AFTER)

Standard library only, but ``stop-earlier`` (Ray's Jobs SDK, in the gate's image).
"""

from __future__ import annotations

import json
import sys

from .exit_codes import EXIT_FAILED, EXIT_NO_ANSWER, EXIT_OK, EXIT_USAGE

CHECK_JOB_PREFIX = "efa-check-"
"""Submission ids of the gate's Ray jobs (check_script names them; efacheck/efa_check.py finds the GPUs they
hold)."""
DIGEST_ENV = "RAY_EFA_EKS_IMAGE_DIGEST"
"""The check's default for ``--image-digest`` (efacheck/check_args.py)."""


def stop_earlier(address: str) -> int:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(address)
    for job in client.list_jobs():
        if (job.submission_id or "").startswith(CHECK_JOB_PREFIX) and job.status in (
            JobStatus.PENDING,
            JobStatus.RUNNING,
        ):
            print(f"stopping earlier EFA check job {job.submission_id}", flush=True)
            client.stop_job(job.submission_id)
    return EXIT_OK


def read_digest(path: str) -> int:
    digest = json.load(open(path))["image_fleet"].get("digest")
    if digest:
        print(json.dumps({"env_vars": {DIGEST_ENV: digest}}))
    return EXIT_OK


def audit_ready(path: str, after: str) -> int:
    audit = json.load(open(path))["image_fleet"]
    return EXIT_OK if audit.get("at", float("inf")) >= float(after) else EXIT_FAILED


def combine(path: str, after: str, check: str) -> int:
    try:
        audit = json.load(open(path))["image_fleet"]
        if audit.get("at", float("inf")) < float(after):
            audit = {
                **audit,
                "verdict": "undetermined",
                "failure": {
                    "stage": "image-fleet",
                    "reason": "the image audit took no pass after the check ended (its last "
                    "listed the pods before); see the image-audit container's log",
                },
            }
    except (OSError, ValueError, KeyError, TypeError) as e:
        audit = {
            "verdict": "undetermined",
            "failure": {"stage": "image-fleet", "reason": f"the image audit left no verdict: {e}"},
        }
    print(json.dumps({"image_fleet": audit}, sort_keys=True))
    code = {"ok": EXIT_OK, "mixed": EXIT_FAILED}.get(audit.get("verdict"), EXIT_NO_ANSWER)
    if int(check) == EXIT_OK and code:
        print(
            json.dumps(
                {
                    "verdict": "undetermined" if code == EXIT_NO_ANSWER else "fallback",
                    "code": code,
                    "failure": audit["failure"],
                }
            )
        )
        print(f"EFA check passed but the image audit did not (exit {code}): see the image_fleet JSON above")
    return int(check) or code


STEPS = {
    "stop-earlier": (stop_earlier, 1),
    "read-digest": (read_digest, 1),
    "audit-ready": (audit_ready, 2),
    "combine": (combine, 3),
}


def main(argv: list[str]) -> int:
    step = STEPS.get(argv[0]) if argv else None
    if step is None or len(argv) - 1 != step[1]:
        print(
            f"usage: python -m ray_efa_eks.efacheck.gate_steps {{{','.join(STEPS)}}} ARGS (see the docstring)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return step[0](*argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
