"""Generated bad input: random and boundary values at every config key and every CLI option.

Not a table of cases fixed one by one: Hypothesis draws values (any Unicode text, huge and negative numbers, nan/inf,
lists, mappings, None, and each grammar's own edge values from components/config/values.py) and throws them at

- every stack key through ``StackConfig.from_mapping`` (the path the stack, the plan and the provider share): the
  answer is a config value or a :class:`ConfigError` naming that key, nothing else;
- a sample of them through ``ray-efa-eks plan --check --config KEY=VALUE``;
- every option of every subcommand (read from its own ``--help``): ``ray-efa-eks SUB OPTION VALUE [OPTION VALUE]``.

Each answer must be a code in that command's row of tools/dev/exit_status.py, never 70 (an internal error, i.e. a bug),
never a traceback, and nothing may be written outside the temporary directory. In process, with Ray, AWS, the Jobs
API, the exporter's server and the mutation runs replaced by guards (:class:`Started`): valid arguments that would
start one end there, which counts as an answer. The counts are printed (``pytest -s``) and asserted.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_efa_eks.components.config.config import KEYS, ConfigError, StackConfig, grammar
from ray_efa_eks.tools import command
from ray_efa_eks.tools.dev import exit_status

ROOT = Path(__file__).resolve().parents[1]
TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
TRIED: Counter = Counter()
SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class Started(BaseException):
    """Valid arguments reached Ray, AWS, a Jobs API, a server or a mutation run: the input was accepted."""


BOUNDARY = sorted({b for k in KEYS for b in grammar(k).boundary() if isinstance(b, str)}, key=lambda s: (len(s), s))
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=60)
ARG_TEXT = st.one_of(
    TEXT.filter(lambda s: "\x00" not in s),
    st.sampled_from(BOUNDARY).filter(lambda s: "\x00" not in s),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(str),
)
"""What a user can type as one argument (argv cannot hold NUL)."""
VALUES = st.one_of(
    TEXT,
    st.sampled_from(BOUNDARY),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.lists(st.one_of(TEXT, st.integers()), max_size=4),
    st.dictionaries(TEXT, TEXT, max_size=2),
)
"""What a stack file (YAML) or another language's program can hand a key."""


@pytest.fixture
def guards(monkeypatch, tmp_path):
    import boto3.session
    import ray

    from ray_efa_eks.efacheck import efa_exporter
    from ray_efa_eks.efacheck import report as efa_report
    from ray_efa_eks.tools.dev import config_schema, gen_catalogue, mutate
    from ray_efa_eks.training import reach
    from ray_efa_eks.training import storage_check
    from ray_efa_eks.efacheck import local_cluster

    def started(what):
        def boom(*a, **k):
            raise Started(what)

        return boom

    for target, name in [
        (ray, "init"),
        (local_cluster, "local_cluster"),
        (boto3.session, "Session"),
        (reach, "probe"),
        (efa_exporter, "serve"),
        (mutate, "copy_tree"),
        (storage_check, "check"),  # asks the storage, creating a directory: tested on its own
        (gen_catalogue, "write"),
        (gen_catalogue, "stale"),
        (config_schema, "write"),
        (efa_report, "write_report"),
    ]:  # --report DIR writes where the user asked: accepted
        monkeypatch.setattr(target, name, started(f"{target.__name__}.{name}"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # trace files and temporary plans
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.chdir(ROOT)
    before = _written()
    yield
    assert _written() == before, "a command wrote inside the checkout"


def _written() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--ignored=no"], cwd=ROOT, capture_output=True, text=True
    ).stdout


def _run(argv: list[str]) -> tuple[int | None, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = command.main(argv)
    except Started:
        code = None
    return code, out.getvalue() + err.getvalue()


# -- config keys --------------------------------------------------------------------------------------------------


@settings(max_examples=1500, **SETTINGS)
@given(key=st.sampled_from(sorted(KEYS - {"region"})), value=VALUES)
def test_every_key_answers_a_config_error_or_a_value(key, value):
    TRIED["config values"] += 1
    try:
        StackConfig.from_mapping({key: value})
    except ConfigError as e:
        assert e.key in (key, *KEYS) and "ray-efa-eks:" in str(e), (key, value, e)


def test_every_grammars_edges():
    """Each key's own boundary values, every one (deterministic, on top of the random draws)."""
    for key in sorted(KEYS - {"region"}):
        for value in grammar(key).boundary():
            TRIED["config edges"] += 1
            try:
                StackConfig.from_mapping({key: value})
            except ConfigError as e:
                assert e.key in KEYS, (key, value, e)


@settings(max_examples=25, **SETTINGS)
@given(key=st.sampled_from(sorted(KEYS - {"region"})), value=ARG_TEXT)
def test_plan_answers_every_config_value(guards, key, value):
    TRIED["plan --config"] += 1
    code, text = _run(["plan", "--check", "--config", f"{key}={value}"])
    assert code in (0, 1, 2), (key, value, code, text[-2000:])
    assert not TRACEBACK.search(text), text[-3000:]


# -- CLI options --------------------------------------------------------------------------------------------------


def _options(sub: str) -> list[str]:
    code, text = _run([sub, "--help"])
    assert code == 0, text
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text)) - {"--help"})


OPTIONS = {sub: _options(sub) for sub in command.SUBCOMMANDS}


@st.composite
def argv(draw):
    sub = draw(st.sampled_from(sorted(OPTIONS)))
    args = [sub]
    for _ in range(draw(st.integers(1, 2))):
        args += [draw(st.sampled_from(OPTIONS[sub] or ["--help"])), draw(ARG_TEXT)]
    return args


@settings(max_examples=400, **SETTINGS)
@given(args=argv())
def test_every_option_answers_a_documented_code(guards, args):
    TRIED["CLI argv"] += 1
    code, text = _run(args)
    allowed = set(exit_status.codes(args[0])) - {exit_status.ExitStatus.INTERNAL}
    assert code is None or code in allowed, (args, code, text[-3000:])
    assert not TRACEBACK.search(text), (args, text[-3000:])


def test_zz_counts():
    """How many inputs the generated tests tried (run with -s to see them)."""
    print("\ngenerated inputs tried: " + json.dumps(dict(TRIED)) + f", total {sum(TRIED.values())}")
    if TRIED:  # when run alone (-k) the others did not run
        assert sum(TRIED.values()) >= 500
