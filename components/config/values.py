"""Value grammars: every config value parsed once, by the grammar of the service it reaches, with that grammar's source.

A stack key, a component argument and a CLI option that take the same kind of value use the same grammar here, so
the stack (``config.py``), the offline plan and the component provider refuse the same values with the same words.
Each grammar parses Pulumi's string config or an engine's JSON value into a typed value, or raises
:class:`ValueProblem` with the fix (never naming the key: the caller does).

Adding a stack key: declare the field on ``StackConfig`` and give it a grammar in ``config.GRAMMARS``::

    GRAMMARS["gpuScaleToZero"] = Bool()
    GRAMMARS["metricsPort"] = Int(1024, 65535, source="TCP ports above the privileged range")

A CLI option takes one through :func:`argtype` (``type=argtype(S3KeyPrefix())``). A grammar refuses what the
service refuses (citing it in ``source``); a style preference is a warning elsewhere, never a grammar.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .url_rule import url_fault


class ValueProblem(ValueError):
    """A value outside its grammar: ``fix`` says what is wrong and what to write; ``value`` the offending part."""

    def __init__(self, fix: str, value: Any = None):
        super().__init__(fix)
        self.fix = fix
        self.value = value


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# -- scalars ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grammar:
    """Base: ``parse`` coerces then checks; ``check`` validates an already typed value; ``source`` cites the rule."""

    source: str = field(default="", kw_only=True)

    def coerce(self, raw: Any) -> Any:
        return raw

    def check(self, value: Any) -> None:
        """Raise :class:`ValueProblem` when ``value`` is outside the grammar."""

    def parse(self, raw: Any) -> Any:
        value = self.coerce(raw)
        self.check(value)
        return value

    def problem(self, value: Any) -> str | None:
        """The fix for ``value`` (already typed), or None when it is valid."""
        try:
            self.check(value)
        except ValueProblem as p:
            return p.fix
        return None

    def boundary(self) -> list[Any]:
        """Values at and just past the grammar's edges, as text a user could type (for the generated tests)."""
        return ["", " ", "\x00", "é", "*", "../x", "-1", "0", "nan", "1e309", "x" * 5000]


@dataclass(frozen=True)
class Bool(Grammar):
    """true/false (Pulumi config is text: also 1/0, yes/no, any case)."""

    def coerce(self, raw: Any) -> bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise ValueProblem("must be true or false", raw)

    def check(self, value: Any) -> None:
        if not isinstance(value, bool):
            raise ValueProblem("must be true or false", value)

    def boundary(self) -> list[Any]:
        return [*super().boundary(), "true", "False", "2", "maybe"]


def to_whole(raw: Any) -> int | None:
    """``2``, ``2.0``, ``"2"`` and ``"2.0"`` -> 2; booleans, fractions, inf/nan and other text -> None.

    Integer keys take integral doubles: a protobuf ``Struct`` has only doubles, so ``gpuNodeCount: 2`` from YAML,
    TypeScript, Go or .NET reaches ``Construct`` as ``2.0`` (google/protobuf/struct.proto, ``number_value``).
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        text = raw.strip()
        if len(text) > 40:  # no bound here is 40 digits long; int() on a 5000-digit string raises
            return None
        if re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if not re.fullmatch(r"[-+]?\d+\.\d*", text):
            return None
        raw = float(text)
    if isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        return int(raw)
    return None


@dataclass(frozen=True)
class Int(Grammar):
    """A whole number in ``lo..hi``; ``below``/``above`` replace the default fix for either side."""

    lo: int = 0
    hi: int = 2**31 - 1
    example: int | None = None
    below: str = ""
    above: str = ""

    def coerce(self, raw: Any) -> int:
        whole = to_whole(raw)
        if whole is None:
            raise ValueProblem(
                f"must be a whole number, e.g. {self.example if self.example is not None else self.lo}", raw
            )
        return whole

    def check(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueProblem(
                f"must be a whole number, e.g. {self.example if self.example is not None else self.lo}", value
            )
        if value < self.lo:
            raise ValueProblem(self.below or f"must be >= {self.lo} (at most {self.hi})", value)
        if value > self.hi:
            raise ValueProblem(self.above or f"must be <= {self.hi}{self._cite()}", value)

    def _cite(self) -> str:
        return f" ({self.source})" if self.source else ""

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            str(self.lo - 1),
            str(self.lo),
            str(self.hi),
            str(self.hi + 1),
            f"{self.lo}.0",
            "2.5",
            str(10**12),
            str(-(10**12)),
            "true",
            "0x10",
        ]


@dataclass(frozen=True)
class Float(Grammar):
    """A finite number in ``lo..hi`` (nan and inf are never limits)."""

    lo: float = 0.0
    hi: float = math.inf
    example: float = 0.0
    below: str = ""
    above: str = ""

    def coerce(self, raw: Any) -> float:
        try:
            if isinstance(raw, bool) or (isinstance(raw, str) and len(raw) > 64):
                raise ValueError(raw)
            return float(raw)
        except (TypeError, ValueError):
            raise ValueProblem(f"must be a number, e.g. {self.example}", raw) from None

    def check(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueProblem(f"must be a number, e.g. {self.example}", value)
        if not math.isfinite(value):
            raise ValueProblem(f"must be a finite number (nan and inf are not limits), e.g. {self.example}", value)
        if value < self.lo:
            raise ValueProblem(self.below or f"must be >= {self.lo}", value)
        if value > self.hi:
            raise ValueProblem(self.above or f"must be <= {self.hi}", value)

    def boundary(self) -> list[Any]:
        hi = [] if math.isinf(self.hi) else [str(self.hi), str(self.hi * 1.5 + 1)]
        return [*super().boundary(), str(self.lo), str(self.lo - 1), *hi, "inf", "-inf", "1e400", "true"]


@dataclass(frozen=True)
class Text(Grammar):
    """A string matching ``pattern`` (full match), at most ``max_len`` characters; numbers become their text.

    ``fix`` is what to write instead; ``ascii_only`` refuses characters outside printable ASCII first (a look-alike
    Unicode letter in a name is a different name to AWS and Kubernetes).
    """

    pattern: str = r"[ -~]+"
    fix: str = "must be printable ASCII text"
    max_len: int = 256
    min_len: int = 1
    ascii_only: bool = True

    def coerce(self, raw: Any) -> str:
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise ValueProblem(f"must be text, not {type(raw).__name__}; {self.fix}", raw)
        return raw if isinstance(raw, str) else str(raw)

    def check(self, value: Any) -> None:
        if not isinstance(value, str):
            raise ValueProblem(f"must be text, not {type(value).__name__}; {self.fix}", value)
        if len(value) < self.min_len:
            raise ValueProblem(f"is empty; {self.fix}" if not value else self.fix, value)
        if len(value) > self.max_len:
            raise ValueProblem(
                f"is {len(value)} characters, at most {self.max_len} are allowed"
                f"{' (' + self.source + ')' if self.source else ''}; {self.fix}",
                value,
            )
        if self.ascii_only and not re.fullmatch(r"[ -~]*", value):
            bad = next(c for c in value if not " " <= c <= "~")
            raise ValueProblem(f"contains {bad!r} (U+{ord(bad):04X}), which is not printable ASCII; {self.fix}", value)
        if not re.fullmatch(self.pattern, value):
            raise ValueProblem(self.fix, value)

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            "a" * self.max_len,
            "a" * (self.max_len + 1),
            "A",
            "-a",
            "a-",
            "a b",
            "a\nb",
            "ﬀ",
            "a" * 64,
            "a" * 65,
            "a" * 253,
            "a" * 254,
        ]


@dataclass(frozen=True)
class OneOf(Text):
    """One of ``choices`` (``case_insensitive``: any case, returned as the choice's spelling)."""

    choices: tuple[str, ...] = ()
    case_insensitive: bool = False

    def coerce(self, raw: Any) -> str:
        value = super().coerce(raw)
        if self.case_insensitive:
            for c in self.choices:
                if c.lower() == value.strip().lower():
                    return c
        return value

    def check(self, value: Any) -> None:
        if value not in self.choices:
            near = [c for c in self.choices if isinstance(value, str) and c.lower() == value.lower()]
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueProblem(
                f"must be one of {', '.join(self.choices)}{hint}{' (' + self.source + ')' if self.source else ''}",
                value,
            )

    def boundary(self) -> list[Any]:
        return [*super().boundary(), *self.choices, *(c.upper() for c in self.choices), "other"]


@dataclass(frozen=True)
class OrUnset(Grammar):
    """Unset (None, or an empty string from Pulumi text config) or a value of ``inner``."""

    inner: Grammar = field(default_factory=Grammar)

    def coerce(self, raw: Any) -> Any:
        return None if raw is None or raw == "" else self.inner.coerce(raw)

    def check(self, value: Any) -> None:
        if value is not None:
            self.inner.check(value)

    def boundary(self) -> list[Any]:
        return self.inner.boundary()


@dataclass(frozen=True)
class ListOf(Grammar):
    """A list of ``item`` values: a JSON list (``pulumi config set --path`` / YAML lists) or comma-separated text.

    ``max_items`` is the service's limit on the list; an item's problem names the item.
    """

    item: Grammar = field(default_factory=Text)
    max_items: int = 1000
    unique: bool = False
    max_reason: str = ""

    def coerce(self, raw: Any) -> list[Any]:
        if isinstance(raw, str) and raw.strip().startswith("["):
            try:
                raw = json.loads(raw)
            except ValueError:
                raise ValueProblem("must be a JSON list or comma-separated values", raw) from None
        if isinstance(raw, str):
            items = [s.strip() for s in raw.split(",") if s.strip()]
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            raise ValueProblem("must be a list (a YAML/JSON list or comma-separated values)", raw)
        return [self.item.coerce(i) for i in items]

    def check(self, value: Any) -> None:
        if not isinstance(value, list):
            raise ValueProblem("must be a list (a YAML/JSON list or comma-separated values)", value)
        if len(value) > self.max_items:
            raise ValueProblem(
                f"has {len(value)} entries; at most {self.max_items} are allowed"
                f"{' (' + self.max_reason + ')' if self.max_reason else ''}",
                f"{len(value)} entries",
            )
        for item in value:
            try:
                self.item.check(item)
            except ValueProblem as p:
                raise ValueProblem(p.fix, item) from None
        if self.unique:
            seen: set[Any] = set()
            for item in value:
                if item in seen:
                    raise ValueProblem("is listed twice; list each entry once", item)
                seen.add(item)

    def boundary(self) -> list[Any]:
        inner = [b for b in self.item.boundary() if isinstance(b, str)][:8]
        return [*super().boundary(), "[]", "[1, 2]", "{}", "[", json.dumps(inner), ",".join(["a"] * 50)]


# -- network ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cidr(Grammar):
    """An IP network in CIDR notation, host bits zero, of IP ``family`` and prefix length ``min_prefix..max_prefix``."""

    family: int = 4
    min_prefix: int = 0
    max_prefix: int = 32
    example: str = "203.0.113.0/24"
    wrong_family: str = ""
    out_of_range: str = ""

    def coerce(self, raw: Any) -> str:
        if not isinstance(raw, str):
            raise ValueProblem(f"must be a CIDR such as {self.example}", raw)
        return raw.strip()

    def check(self, value: Any) -> None:
        try:
            net = ipaddress.ip_network(value) if isinstance(value, str) else None
        except ValueError:
            net = None
        if net is None:
            raise ValueProblem(
                f"must be a CIDR such as {self.example} (an address, '/', a prefix length; the bits "
                "after the prefix zero)",
                value,
            )
        if net.version != self.family:
            raise ValueProblem(
                self.wrong_family or f"is IPv{net.version}; use an IPv{self.family} CIDR such as {self.example}", value
            )
        if not self.min_prefix <= net.prefixlen <= self.max_prefix:
            raise ValueProblem(
                self.out_of_range or f"prefix length must be /{self.min_prefix} to /{self.max_prefix}", value
            )

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            "0.0.0.0/0",
            "::/0",
            "2001:db8::/32",
            "10.0.0.1/16",
            "10.0.0.0/33",
            "256.0.0.0/8",
            "10.0.0.0",
            f"10.0.0.0/{self.min_prefix - 1}",
            f"10.0.0.0/{self.max_prefix}",
            "10.0.0.0/-1",
            "banana",
        ]


@dataclass(frozen=True)
class Port(Int):
    """A TCP/UDP port, 1..65535 (RFC 793: a 16-bit field; 0 is reserved)."""

    lo: int = 1
    hi: int = 65535
    source: str = "TCP ports are 16-bit, 1..65535 (RFC 793)"


# -- AWS ----------------------------------------------------------------------------------------------------------

REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d+")
"""AWS region names: <area>-<direction>-<n> (us-east-1, us-gov-west-1, ap-southeast-2, cn-north-1);
https://docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html"""


@dataclass(frozen=True)
class Region(Text):
    pattern: str = REGION.pattern
    fix: str = "is not an AWS region name; use one such as us-east-1 or eu-west-1 (aws ec2 describe-regions)"
    max_len: int = 32
    source: str = "docs.aws.amazon.com/global-infrastructure/latest/regions/aws-regions.html"


IAM_NAME_CHARS = r"[\w+=,.@-]"
"""IAM user, role and path characters: ASCII letters, digits and + = , . @ _ - (IAM User Guide, 'IAM name
requirements', docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html). ``\\w`` is ASCII here."""
IAM_QUOTAS = "docs.aws.amazon.com/IAM/latest/UserGuide/reference_iam-quotas.html"


@dataclass(frozen=True)
class IamName(Text):
    """An IAM role or user name: 1..64 of ASCII letters, digits and ``+=,.@_-`` (IAM name requirements)."""

    pattern: str = rf"(?a:{IAM_NAME_CHARS}+)"
    fix: str = "IAM names are 1-64 ASCII letters, digits and + = , . @ _ -"
    max_len: int = 64
    source: str = IAM_QUOTAS


PRINCIPAL_ARN = re.compile(r"arn:(aws|aws-cn|aws-us-gov):iam::(\d{12}):(role|user)(/.*)")
ARN_MAX = 2048
"""IAM API ``arnType``: 20..2048 characters (e.g. IAM CreateRole's RoleArn; EKS CreateAccessEntry principalArn)."""


@dataclass(frozen=True)
class PrincipalArn(Grammar):
    """An IAM role or user ARN: partition, 12-digit account, ``role|user``, an optional path, a name.

    IAM: names 1..64 characters (``role/`` and ``user/``), paths ``/.../`` up to 512, both of ASCII letters,
    digits and ``+=,.@_-`` (reference_iam-quotas.html); ARNs 20..2048 characters. No wildcards: an EKS access
    entry names one principal.
    """

    source: str = IAM_QUOTAS

    def coerce(self, raw: Any) -> Any:
        return raw.strip() if isinstance(raw, str) else raw

    def check(self, arn: Any) -> None:
        if not isinstance(arn, str) or not arn:
            raise ValueProblem(
                "must be an IAM role or user ARN such as arn:aws:iam::123456789012:role/platform-admins", arn
            )
        if len(arn) > ARN_MAX:
            raise ValueProblem(f"is {len(arn)} characters; IAM ARNs are at most {ARN_MAX} ({IAM_QUOTAS})", arn)
        if not re.fullmatch(r"[ -~]+", arn):
            bad = next(c for c in arn if not " " <= c <= "~")
            raise ValueProblem(
                f"contains {bad!r} (U+{ord(bad):04X}); IAM names and paths are ASCII letters, digits "
                f"and + = , . @ _ - ({IAM_QUOTAS})",
                arn,
            )
        sts = re.fullmatch(r"arn:(aws|aws-cn|aws-us-gov):sts::(\d{12}):assumed-role/([\w+=,.@-]+)/.*", arn)
        if sts:
            raise ValueProblem(
                f"is an STS session, which access entries do not accept; use the role: "
                f"arn:{sts.group(1)}:iam::{sts.group(2)}:role/{sts.group(3)} (add its path if it has one)",
                arn,
            )
        m = PRINCIPAL_ARN.fullmatch(arn)
        rest = m.group(4) if m else ""
        path, _, name = rest.rpartition("/")
        if (
            not m
            or not re.fullmatch(rf"(?a:{IAM_NAME_CHARS}+)", name)
            or (path and not re.fullmatch(rf"(?a:(/{IAM_NAME_CHARS}+)+)", path))
        ):
            raise ValueProblem(
                "is not an IAM role or user ARN; expected arn:aws:iam::<12-digit account>:role/<name> "
                "or arn:aws:iam::<account>:user/<name> (groups and wildcards cannot have access entries)",
                arn,
            )
        if len(name) > 64:
            raise ValueProblem(
                f"the {m.group(3)} name is {len(name)} characters; IAM {m.group(3)} names are at most "
                f"64 ({IAM_QUOTAS})",
                arn,
            )
        if len(path) + 1 > 512:
            raise ValueProblem(f"the path is {len(path) + 1} characters; IAM paths are at most 512 ({IAM_QUOTAS})", arn)

    def boundary(self) -> list[Any]:
        base = "arn:aws:iam::123456789012:role/"
        return [
            *super().boundary(),
            base + "admins",
            base + "*",
            base + "a" * 64,
            base + "a" * 65,
            base + "ädmin",
            base + "p/" * 300 + "x",
            "arn:aws:iam::123456789012:group/g",
            "arn:aws:sts::123456789012:assumed-role/A/s",
            base,
            base + "a/",
            base + "a//b",
            "arn:aws:iam::12345:role/x",
        ]


S3_KEYS = "docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html"
IAM_WILDCARDS = "docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_elements_resource.html"
S3_PREFIX_MAX = 512
"""S3 object keys are at most 1024 bytes with their prefix (object-keys.html); checkpoints append run and file names,
so the stack's prefix takes at most half."""


@dataclass(frozen=True)
class S3KeyPrefix(Grammar):
    """An S3 key prefix that reaches an IAM policy: ``segment[/segment...]``, no leading/trailing/double slash.

    Segments use S3's "safe characters" (object-keys.html: letters, digits, ``! - _ . ' ( )``; its ``*`` is left out
    on purpose) because the prefix lands in the pods' policy as ``bucket/PREFIX/*`` and ``s3:prefix``: IAM reads
    ``*`` and ``?`` in a Resource or a StringLike condition as wildcards and ``${...}`` as a policy variable
    (reference_policies_elements_resource.html), so ``*`` would grant the whole bucket. ``.`` and ``..`` segments
    are refused too: S3 keeps them literally but SDKs, the console and ``pyarrow``'s paths normalise them, so
    ``a/../b`` is ``b`` to one reader and a separate key to another (object-keys.html, "Naming objects").
    """

    source: str = f"{S3_KEYS}; {IAM_WILDCARDS}"

    def coerce(self, raw: Any) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
            raise ValueProblem("must be text such as ray-train", raw)
        return raw if isinstance(raw, str) else str(raw)

    def check(self, prefix: Any) -> None:
        fix = "use S3-safe path segments without leading/trailing slashes, e.g. ray-train or team-a/ray-train"
        if not isinstance(prefix, str) or not prefix:
            raise ValueProblem(f"is empty; {fix}", prefix)
        if len(prefix.encode()) > S3_PREFIX_MAX:
            raise ValueProblem(
                f"is {len(prefix.encode())} bytes; S3 keys are at most 1024 bytes with the run and file "
                f"names Ray appends, so the prefix may take {S3_PREFIX_MAX} ({S3_KEYS})",
                prefix,
            )
        wild = sorted({c for c in prefix if c in "*?$"})
        if wild:
            raise ValueProblem(
                f"contains {''.join(wild)!r}: IAM reads * and ? as wildcards and ${{...}} as a policy "
                f"variable in the pods' policy (bucket/PREFIX/*, s3:prefix), which would widen it past "
                f"this prefix ({IAM_WILDCARDS}); {fix}",
                prefix,
            )
        segments = prefix.split("/")
        if any(s in (".", "..") for s in segments):
            raise ValueProblem(
                f"has a '.' or '..' path segment (path traversal: tools and SDKs normalise it, S3 does "
                f"not, so reads and writes would disagree on the key; {S3_KEYS}); {fix}",
                prefix,
            )
        if "" in segments:
            raise ValueProblem(
                f"has a leading, trailing or double slash; {fix} (without leading/trailing slashes)", prefix
            )
        for s in segments:
            if not re.fullmatch(r"[A-Za-z0-9!_.'()-]+", s):
                bad = next(c for c in s if not re.fullmatch(r"[A-Za-z0-9!_.'()-]", c))
                raise ValueProblem(
                    f"contains {bad!r}, outside S3's safe characters (letters, digits, ! - _ . ' ( ); "
                    f"{S3_KEYS}); {fix}",
                    prefix,
                )

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            "ray-train",
            "a/b",
            "*",
            "a/*",
            "a?",
            "${aws:username}",
            "a/../b",
            "./a",
            "..",
            "/a",
            "a/",
            "a//b",
            "a b",
            "a" * S3_PREFIX_MAX,
            "a" * (S3_PREFIX_MAX + 1),
            "é" * 300,
        ]


# -- containers and Kubernetes ------------------------------------------------------------------------------------

# The OCI distribution reference grammar (distribution/reference, reference.go and regexp.go; the same grammar the
# kubelet/containerd parse an image with): [domain[:port]/]path[:tag][@digest], path components lowercase
# alphanumerics joined by '.', '_', '__' or '-'s, tags [\w][\w.-]{0,127}, the name at most 255 characters.
_ALNUM = r"[a-z0-9]+"
_SEP = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEP}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REFERENCE = re.compile(rf"(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?", re.ASCII)
NAME_MAX = 255
"""distribution/reference: ``NameTotalLengthMax``."""
DIGEST_ENCODED = {"sha256": re.compile(r"[a-f0-9]{64}"), "sha512": re.compile(r"[a-f0-9]{128}")}
"""opencontainers/go-digest algorithm.go: the registered algorithms and their encodings (lowercase hex of the hash's
length); ``digest.Parse`` (which the reference parser calls) refuses any other algorithm or encoding."""


def image_reference_problem(image: Any) -> str | None:
    """Why ``image`` is no OCI image reference (None when it is one), by the distribution grammar above."""
    if not isinstance(image, str) or not image:
        return "must be an image reference such as public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    if len(image) > 4096:
        return f"is {len(image)} characters; an image reference is a registry path, a tag and a digest"
    m = IMAGE_REFERENCE.fullmatch(image)
    if m is None:
        name, _, tag = image.rpartition("@")[0].rpartition(":") if "@" in image else image.rpartition(":")
        if tag and "/" not in tag and re.fullmatch(_NAME, name) and not re.fullmatch(_TAG, tag, re.ASCII):
            return (
                f"the tag {tag[:40]!r}{'...' if len(tag) > 40 else ''} is not a valid tag (letters, digits, "
                "'_', '.', '-', at most 128 characters, not starting with '.' or '-')"
            )
        return (
            "is not an image reference (OCI distribution grammar: [registry[:port]/]lowercase/path[:tag]"
            "[@sha256:digest], no spaces or uppercase in the path), e.g. "
            "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
        )
    if len(m.group("name")) > NAME_MAX:
        return f"the repository name is {len(m.group('name'))} characters; references allow at most {NAME_MAX}"
    digest = m.group("digest")
    if digest:
        algorithm, _, encoded = digest.partition(":")
        pattern = DIGEST_ENCODED.get(algorithm)
        if pattern is None:
            return (
                f"the digest algorithm {algorithm!r} is not one registries use; pin with @sha256: and 64 "
                "lowercase hex digits (opencontainers/go-digest)"
            )
        if not pattern.fullmatch(encoded):
            want = 64 if algorithm == "sha256" else 128
            return (
                f"the {algorithm} digest has {len(encoded)} characters{' with uppercase' if encoded.lower() != encoded else ''}; "
                f"it must be exactly {want} lowercase hex digits (opencontainers/go-digest), as "
                "`docker buildx imagetools inspect IMAGE` prints it"
            )
    return None


def image_tag(image: str) -> str | None:
    """Tag of ``repo[:port]/name:tag`` (None when untagged or pinned only by digest)."""
    last = image.rsplit("/", 1)[-1]
    if "@" in last:
        return None
    return last.split(":", 1)[1] if ":" in last else None


@dataclass(frozen=True)
class ImageReference(Text):
    """An OCI image reference pinned by a tag other than ``latest`` or by a digest (reproducible pulls)."""

    pattern: str = r"[\s\S]*"
    fix: str = "e.g. public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"
    max_len: int = 4096
    source: str = "distribution/reference regexp.go; opencontainers/go-digest"

    def check(self, value: Any) -> None:
        problem = image_reference_problem(value)
        if problem:
            raise ValueProblem(problem, value)
        tag = image_tag(value)  # None when pinned by digest: in a valid reference '@' only starts the digest
        if tag is None and "@" not in value:
            raise ValueProblem(
                "needs an explicit tag (e.g. ...ray:train-ml-cuda-v1.1) or a digest (@sha256:...)", value
            )
        if tag == "latest":
            raise ValueProblem("':latest' is not reproducible; pin a versioned tag", value)

    def boundary(self) -> list[Any]:
        d = "a" * 64
        return [
            *super().boundary(),
            "repo/ray",
            "repo/ray:latest",
            "repo/ray:1",
            f"repo/ray@sha256:{d}",
            f"repo/ray@sha256:{d[:63]}",
            f"repo/ray@sha256:{d.upper()}",
            f"repo/ray@md5:{d}",
            "Repo/ray:1",
            "repo/ray:" + "t" * 129,
            "my image:1",
        ]


SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?",
    re.ASCII,
)
"""Semantic Versioning 2.0.0 (semver.org, the suggested regular expression)."""


@dataclass(frozen=True)
class ChartVersion(Text):
    """A Helm chart version: SemVer 2 (helm.sh/docs/topics/charts, 'Charts and Versioning': every chart version is
    a SemVer 2 version, e.g. KubeRay's 1.7.0)."""

    pattern: str = SEMVER.pattern
    fix: str = "must be a chart version (SemVer 2: MAJOR.MINOR.PATCH), e.g. 1.7.0"
    max_len: int = 64
    source: str = "helm.sh/docs/topics/charts (Charts and Versioning); semver.org"


@dataclass(frozen=True)
class DnsLabel(Text):
    """RFC 1123 label (Kubernetes ``IsDNS1123Label``): 1..63 lowercase alphanumerics and '-', alphanumeric ends."""

    pattern: str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
    fix: str = "must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending alphanumeric, e.g. ray"
    max_len: int = 63
    source: str = "k8s.io/apimachinery/pkg/util/validation IsDNS1123Label"


@dataclass(frozen=True)
class DnsSubdomain(Text):
    """RFC 1123 subdomain (``IsDNS1123Subdomain``): dot-separated labels, at most 253 characters."""

    pattern: str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    fix: str = "must be a DNS-1123 subdomain: lowercase labels of letters, digits and '-' joined by '.', e.g. ray-train"
    max_len: int = 253
    source: str = "k8s.io/apimachinery/pkg/util/validation IsDNS1123Subdomain"


_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"


@dataclass(frozen=True)
class LabelValue(Text):
    """A Kubernetes label value (``IsValidLabelValue``): empty, or <= 63 alphanumerics, '-', '_', '.' with
    alphanumeric ends."""

    pattern: str = rf"(?:{_LABEL_NAME})?"
    fix: str = "must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    max_len: int = 63
    min_len: int = 0
    source: str = "k8s.io/apimachinery/pkg/util/validation IsValidLabelValue"


@dataclass(frozen=True)
class LabelKey(Text):
    """A Kubernetes label key (``IsQualifiedName``): ``[prefix/]name``, prefix a DNS-1123 subdomain (<= 253), name
    <= 63 alphanumerics, '-', '_', '.' with alphanumeric ends."""

    pattern: str = rf"(?:{DnsSubdomain.pattern}/)?{_LABEL_NAME}"
    fix: str = (
        "must be a label key: [dns-prefix/]name, name at most 63 letters, digits, '-', '_', '.', e.g. ray.io/node-type"
    )
    max_len: int = 253 + 1 + 63
    source: str = "k8s.io/apimachinery/pkg/util/validation IsQualifiedName"

    def check(self, value: Any) -> None:
        super().check(value)
        name = value.rpartition("/")[2]
        if len(name) > 63 or len(value.rpartition("/")[0]) > 253:
            raise ValueProblem(self.fix, value)


QUANTITY = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?", re.ASCII)
"""k8s.io/apimachinery/pkg/api/resource quantity.go: <sign><digits>[.<digits>]<suffix>, suffix binary SI
(Ki..Ei), decimal SI (n u m "" k M G T P E) or a decimal exponent (e3, E-2)."""


@dataclass(frozen=True)
class Quantity(Text):
    """A Kubernetes resource quantity (``resource.ParseQuantity``), not negative: 500m, 2, 16Gi, 1e3."""

    pattern: str = QUANTITY.pattern
    fix: str = "must be a Kubernetes quantity such as 500m, 2, 16Gi or 1e3"
    max_len: int = 64
    source: str = "k8s.io/apimachinery/pkg/api/resource quantity.go"

    def check(self, value: Any) -> None:
        super().check(value)
        if value.startswith("-"):
            raise ValueProblem(f"is negative; {self.fix}", value)


@dataclass(frozen=True)
class Seconds(Int):
    """A duration in whole seconds, ``lo..hi``."""

    example: int | None = 60


@dataclass(frozen=True)
class HttpUrl(Text):
    """An ``http(s)://host[:port][/path]`` URL (a Prometheus ``remote_write`` ``url``: Prometheus parses it with Go's
    net/url and refuses a scheme other than http/https; a port outside 1..65535 never connects)."""

    max_len: int = 2048
    schemes: tuple[str, ...] = ("https", "http")
    fix: str = "must be an https:// URL with a host, e.g. https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-.../api/v1/remote_write"

    def check(self, value: Any) -> None:
        super().check(value)
        from urllib.parse import urlsplit

        if re.search(r"\s", value):
            raise ValueProblem(f"contains whitespace; {self.fix}", value)
        fault = url_fault(value, self.schemes)
        if fault:
            raise ValueProblem(f"{fault}; {self.fix}", value)
        parts = urlsplit(value)
        if parts.username or parts.password:
            raise ValueProblem(
                f"carries credentials in the URL (they would sit in the Prometheus spec in clear); {self.fix}", value
            )

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            "https://h",
            "http://h:9090/api/v1/write",
            "ftp://h",
            "https://",
            "https://h:0",
            "https://h:65536",
            "http://[::1",
            "https://u:p@h",
            "https://h/a b",
        ]


AMP_HOST = re.compile(
    r"aps-workspaces(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-[1-9]\d*)\."
    r"(?:amazonaws\.com(?:\.cn)?|api\.aws)"
)
"""An Amazon Managed Service for Prometheus data-plane host: ``aps-workspaces[-fips].<region>.amazonaws.com`` (IPv4),
``....api.aws`` (dual-stack), ``....amazonaws.com.cn`` (China) (AWS General Reference, "Amazon Managed Service for
Prometheus endpoints and quotas"). The region in the host is the one a write must be signed for."""


def looks_like_amp(host: str) -> bool:
    """A host meant as an AMP workspace endpoint (the data-plane prefix under an AWS domain), well formed or not."""
    return host.startswith("aps-workspaces") and host.endswith((".amazonaws.com", ".amazonaws.com.cn", ".api.aws"))


def amp_region(url: str) -> str | None:
    """The region of an AMP workspace URL's endpoint (``us-east-1`` of ``https://aps-workspaces.us-east-1...``), or
    None for a URL that is not a well-formed AMP endpoint."""
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return None
    m = AMP_HOST.fullmatch(host)
    return m.group("region") if m else None


@dataclass(frozen=True)
class RemoteWriteUrl(HttpUrl):
    """:class:`HttpUrl`; one on an AMP endpoint must name its region in the host the way AWS does, because the write
    is signed (SigV4) for that region and a host without one answers nothing."""

    amp_fix: str = (
        "an Amazon Managed Service for Prometheus URL names its workspace's region: "
        "https://aps-workspaces.REGION.amazonaws.com/workspaces/WORKSPACE_ID/api/v1/remote_write "
        "(the remote write URL on the workspace's page)"
    )

    def check(self, value: Any) -> None:
        super().check(value)
        from urllib.parse import urlsplit

        host = (urlsplit(value).hostname or "").lower()
        if looks_like_amp(host) and amp_region(value) is None:
            raise ValueProblem(f"host {host} is no AMP endpoint; {self.amp_fix}", value)

    def boundary(self) -> list[Any]:
        return [
            *super().boundary(),
            "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
            "https://aps-workspaces.amazonaws.com/workspaces/ws-1/api/v1/remote_write",
        ]


PROMETHEUS_DURATION = re.compile(r"(?:\d+y)?(?:\d+w)?(?:\d+d)?(?:\d+h)?(?:\d+m)?(?:\d+s)?(?:\d+ms)?")
"""Prometheus' duration grammar (prometheus/common model.ParseDuration: units y w d h m s ms, largest first)."""


@dataclass(frozen=True)
class PrometheusDuration(Text):
    """A Prometheus duration above zero (``15d``, ``12h``, ``1w3d``): what ``--storage.tsdb.retention.time`` takes."""

    max_len: int = 32
    fix: str = "must be a Prometheus duration above zero, e.g. 15d, 12h or 1w3d (units y, w, d, h, m, s, ms)"

    def check(self, value: Any) -> None:
        super().check(value)
        if not PROMETHEUS_DURATION.fullmatch(value) or not re.search(r"[1-9]", value):
            raise ValueProblem(self.fix, value)

    def boundary(self) -> list[Any]:
        return [*super().boundary(), "15d", "0d", "0", "1h30m", "30m1h", "15 d", "15D", "1.5d", "d"]


# -- CLI ----------------------------------------------------------------------------------------------------------


def argtype(grammar: Grammar, name: str = "") -> Callable[[str], Any]:
    """An argparse ``type=`` that parses with ``grammar``: a bad value is a usage error naming the value and the fix."""
    import argparse

    def parse(text: str) -> Any:
        try:
            return grammar.parse(text)
        except ValueProblem as p:
            raise argparse.ArgumentTypeError(f"{_short(text)}: {p.fix}") from None

    parse.__name__ = name or type(grammar).__name__
    return parse


def problems(values: dict[str, Any], grammars: dict[str, Grammar]) -> list[tuple[str, Any, str]]:
    """(key, bad value, fix) for every value outside its grammar (keys without one are skipped)."""
    out = []
    for key, value in values.items():
        grammar = grammars.get(key)
        if grammar is None:
            continue
        try:
            grammar.check(value)
        except ValueProblem as p:
            out.append((key, value if p.value is None else p.value, p.fix))
    return out
