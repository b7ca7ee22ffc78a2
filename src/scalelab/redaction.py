"""What must never reach a result file, a log, a terminal or an export: secrets, by name and inside values; control
characters (`inert`); a spreadsheet formula (`csv_text`).

An environment is kept by allow-list (ENV_PREFIXES, ENV_NAMES), less any secret-looking name; every value kept, and
every string a result, a logged hyperparameter or an error.log holds, has the secrets inside it redacted.
"""

import functools
import os
import re

# Environment kept in a result: an allow-list, and even inside it nothing whose name looks secret.
ENV_PREFIXES = ("NCCL_", "SLURM_", "CUDA_", "OMP_", "TORCH_", "TORCHELASTIC_", "PYTORCH_", "MKL_",
                "GLOO_", "UCX_", "FI_", "SUBMITIT_", "MASTER_", "SCALELAB_", "SRUN_",
                "ROCR_", "HIP_", "HSA_", "RCCL_")  # AMD: SLURM sets ROCR_VISIBLE_DEVICES; RCCL reads NCCL_* too
ENV_NAMES = {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK"}
# the test hooks of scalelab/testing/faults.py: never part of a result
ENV_NOT_RECORDED = {"SCALELAB_FAULT", "SCALELAB_FAULT_WEDGED"}
# A name looks secret when one of its parts (split at _ - . or camelCase) is, or ends in, one of these.
_SECRET_PARTS = ("key", "keys", "token", "secret", "secrets", "password", "passwd", "passphrase", "pwd", "pass",
                 "credential", "credentials", "cred", "creds", "auth", "cookie", "private", "signature", "sig",
                 "session", "sessionid", "pat", "jwt", "authorization")
# An environment variable's value is kept only where its name is on the allow-list and holds none of these stems
# anywhere in it (NCCL_IB_PKEY, SLURM_JOB_PASSWORDS, SCALELAB_X_CREDS: recorded as set, without the value): for the
# environment the spelling does not decide, the allow-list does, and a near miss costs a value, never a secret.
_ENV_SECRET_STEMS = ("KEY", "TOKEN", "SECRET", "PASS", "PWD", "CRED", "AUTH", "COOKIE", "PRIVATE", "SIG", "JWT",
                     "SESSION", "CERT", "BEARER")
REDACTED = "<redacted>"
PRESENT = "<set>"  # an allowed variable whose name holds a secret's stem: it was set, its value is not recorded
# A secret inside a value: a URL's user:password@ (git, S3, proxies, MLflow/W&B hosts), `Bearer <token>`, and
# NAME=value / NAME: value / "NAME": value / --NAME value where NAME looks secret (a job comment, a logged command
# line, a JSON text, a URL's query). Each pattern starts only where a name starts (a look-behind), and a quoted
# value with no closing quote runs to the end of the text: every pattern is linear in the text's length (the old
# ones backtracked from every character of a long word: 11 s for 20,000 characters).
_URL_USERINFO = re.compile(r"(?i)(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://)[^/\s@]+@")
_AUTH_SCHEMES = ("bearer", "basic", "token", "digest", "negotiate")  # HTTP Authorization's (RFC 9110)
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+(?!<redacted>)[A-Za-z0-9._~+/=-]+")
_AUTH_HEADER = re.compile(r"(?i)\b((?:proxy-)?authorization\s*:\s*[A-Za-z]+)\s+(?!<redacted>)[^\s,;]+")
_VALUE = r"""(?P<value>"[^"]*(?:"|$)|'[^']*(?:'|$)|[^\s&;,'"]+)"""
_NAMED_VALUES = (re.compile(r"(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[\"']?\s*(?:=|:(?!//))\s*)"
                            + _VALUE),
                 re.compile(r"(?<![\w-])(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>\s+)" + _VALUE))  # --token abc


def looks_secret(name: str) -> bool:
    """HF_TOKEN, WANDB_API_KEY, awsSecretAccessKey: yes. tokens_per_s, SLURM_JOB_ID: no."""
    parts = re.split(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])", str(name))
    for part in (p.lower() for p in parts if p):
        if part in _SECRET_PARTS or part.endswith(("key", "token", "secret", "password")):
            return True
    return False


def redact(text: str) -> str:
    """A value with the secrets inside it replaced: `https://u:pw@host` -> `https://<redacted>@host`,
    `token=abc` / `--api-key abc` / `PASSWORD: abc` -> `token=<redacted>`, `Bearer abc` -> `Bearer <redacted>`.
    `tokens_per_s: 5` stays: a name is secret by its parts (looks_secret), not by containing a word."""
    if not isinstance(text, str):
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)  # `Authorization: token X`: X

    def named(m):
        value = m.group("value").strip("\"'")
        if not looks_secret(m.group("name")) or value == REDACTED or value.lower() in _AUTH_SCHEMES:
            return m.group(0)  # `Authorization: token <redacted>`: the scheme stays, its credentials went above
        quote = m.group("value")[:1] if m.group("value")[:1] in "\"'" else ""
        return f"{m.group('name')}{m.group('sep')}{quote}{REDACTED}{quote}"

    for pattern in _NAMED_VALUES:
        text = pattern.sub(named, text)
    return text


def capture_environment(environ=None) -> dict:
    """The allowed variables (ENV_PREFIXES, ENV_NAMES), each value redacted; one whose name holds a secret's stem
    anywhere (_ENV_SECRET_STEMS) is recorded as set (PRESENT), its value not. Nothing else is recorded."""
    environ = os.environ if environ is None else environ
    return {k: PRESENT if env_name_secret(k) else redact(v) for k, v in sorted(environ.items())
            if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and k not in ENV_NOT_RECORDED}


def env_name_secret(name: str) -> bool:
    """Whether an environment variable's name holds a secret's stem anywhere (not only as a whole part)."""
    upper = str(name).upper()
    return looks_secret(name) or any(stem in upper for stem in _ENV_SECRET_STEMS)


def scrub(obj):
    """Drop secret-looking keys at any depth (configs, logged hyperparameters) and redact secrets inside the
    values kept (`redact`)."""
    if isinstance(obj, dict):
        return {k: scrub(v) for k, v in obj.items() if not looks_secret(k)}
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    return redact(obj) if isinstance(obj, str) else obj


# C0 (but tab and newline), DEL and C1: an escape sequence can retitle, clear or rewrite a terminal (ECMA-48)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(obj):
    """obj with every control character in its strings and keys, at any depth, written out as \\xNN: what a file
    says is shown, never obeyed by the terminal it is printed on."""
    if isinstance(obj, str):
        return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", obj)
    if isinstance(obj, dict):
        return {inert(k): inert(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [inert(v) for v in obj]
    return obj


def as_read(obj):
    """A file read from anywhere, as scalelab shows it: secrets inside its values redacted, control characters
    escaped (inert). Its keys stay: a reader's own names (`hours_for_token_budget`) are no secrets, and a file
    scalelab wrote dropped secret-looking keys already (scrub)."""
    if isinstance(obj, str):
        return _shown(obj)
    if isinstance(obj, dict):
        return {_shown_key(k) if isinstance(k, str) else k: as_read(v) if isinstance(v, _WALKED) else v
                for k, v in obj.items()}
    if isinstance(obj, list):
        if _PLAIN.issuperset(map(type, obj)):  # a rank's per-step numbers: nothing in them to show otherwise
            return list(obj)
        return [as_read(v) if isinstance(v, _WALKED) else v for v in obj]
    return obj


_WALKED = (str, dict, list)  # what as_read changes or looks inside; any other value is as it was
_PLAIN = frozenset({int, float, bool, type(None)})


# A folder's results repeat their strings (hosts, devices, a workload's description) thousands of times: each is
# shown once and remembered, 8,192 of them, each of at most 4,096 characters (a longer one is shown each time).
_REMEMBERED = 4096


def _shown(text: str) -> str:
    return _shown_once(text) if len(text) <= _REMEMBERED else _shown_now(text)


def _shown_now(text: str) -> str:
    if not _MAY_CHANGE.search(text):  # a run id, a date without its time, a device's name: shown as it is
        return text
    if not _WORD_START.search(text) and not _CONTROL.search(text):  # a timestamp: 2026-12-05T01:14:52+00:00
        return text
    return redact(inert(text))  # redacted as shown: an escape before a name ("\\x1b_token=…") hides no secret


# Each pattern of `redact` needs an = , a : (a URL's user:password@ too) or a space to match, and `inert` a control
# character: a text with none of them is what both give back.
_MAY_CHANGE = re.compile(r"[=:\s\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Each pattern of `redact` also starts at a letter no ASCII letter or digit comes before (a scheme, a name, "bearer",
# "--name"): a text without one (a timestamp's T follows a digit) is what it gives back. The letters: those a
# pattern's [a-z] matches, case-insensitive ones too (Python's re: the Kelvin sign, a long s, a dotted and a
# dotless i).
_WORD_START = re.compile("(?<![A-Za-z0-9])[A-Za-z\u0130\u0131\u017f\u212a]")


def _shown_key(key: str) -> str:
    return _inert_once(key) if len(key) <= _REMEMBERED else inert(key)


_shown_once = functools.lru_cache(maxsize=8192)(_shown_now)
_inert_once = functools.lru_cache(maxsize=8192)(inert)


def csv_text(frame) -> str:
    """A frame as CSV a spreadsheet opens as data: a text cell that starts with = + - @ (a formula, OWASP's CSV
    injection) gets a leading ' (shown as text); numbers stay numbers."""
    def cell(value):
        return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value

    import pandas as pd  # a training run never imports it

    frame = frame.copy()
    for column in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[column]):
            frame[column] = frame[column].map(cell)
    return frame.to_csv(index=False)
