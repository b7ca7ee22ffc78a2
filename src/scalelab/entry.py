"""What every entry script shares: one-line errors and a clean exit code.

Users at a workshop must see `train.py: error: <what and how to fix>` and exit 2,
never a usage dump or a traceback wall.
"""

import argparse
import copy
import difflib
import logging
import math
import os
import re
import sys

from scalelab.errors import RunFailed, UsageError

# The variables a launcher announces a process's global rank in, in the order they are trusted: torchrun's (and
# Lightning's), srun's (launch/slurm_env.procid), a local launcher's. Read here, below config and launch/, so that
# config says a warning once per run as every launcher does.
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "LOCAL_RANK")
SECRET = re.compile(r"(^|_)(key|token|secret|password)$")  # an option's dest that holds a secret (comet_api_key)
KNOWN_SECRETS = ("comet_api_key",)  # scalelab's secret flags (config_flags.KEY_FLAG): masked by every command
DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2015\u2212"  # what a flag's dashes become when pasted from a page


def _flag_name(word: str) -> str:
    """A word's flag name, compared as argparse would after a paste: leading dashes of any kind dropped, lower
    case, `-` as `_`; "" for a word that starts with no dash (a value)."""
    name = word.lstrip(DASHES)
    return name.lower().replace("-", "_") if name != word else ""


def env_rank(environ=None) -> int:
    """This process's global rank as the launcher announced it (0 before any launch)."""
    environ = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        if environ.get(name) is not None:
            return int(environ[name])
    return 0


def prog_name(script: str) -> str:
    """The name the user typed: `scalelab-train` from the console script, else the tutorial's `train.py`; every
    usage line and one-line error of an entry point uses it."""
    typed = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return typed if typed.startswith("scalelab-") else script


class DefaultsFormatter(argparse.RawDescriptionHelpFormatter):
    """`(default: 180)` after a flag's help where it has a default, never `(default: None)`. A parser whose flags
    default to None on purpose (to tell "given" from "not given") puts the real one in `action.shown_default`.
    Descriptions and epilogs keep their own line breaks (the examples)."""

    @staticmethod
    def _shown(action):
        default = getattr(action, "shown_default", action.default)
        if default is None or default is False or default in ("", [], ()) or default == argparse.SUPPRESS or \
                action.nargs == 0:
            return None  # a switch (store_true/false) says what it does; its default is "not given"
        if not action.option_strings or "default" in (action.help or "").lower():
            return None
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        return f"(default: {shown.replace('%', '%%')})"

    def _format_action(self, action):
        shown = self._shown(action)
        if shown:
            action = copy.copy(action)
            action.help = f"{action.help} {shown}" if (action.help or "").strip() else shown
        return super()._format_action(action)

    def _get_help_string(self, action):
        return action.help


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line instead of the usage block, names the program as the user
    typed it, and answers --version. A flag is its whole name (no `--mod` for `--model`): what a command line
    says is what scalelab's own scans of it read (workloads.model_words), and a typo names its fix."""

    def __init__(self, *args, prog=None, formatter_class=DefaultsFormatter, allow_abbrev=False, **kwargs):
        super().__init__(*args, prog=prog_name(prog) if prog else None, formatter_class=formatter_class,
                         allow_abbrev=allow_abbrev, **kwargs)
        from scalelab import __version__

        self.add_argument("--version", action="version", version=f"%(prog)s (scalelab) {__version__}")

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        self._secrets = self._secret_values(args)
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(extras))
        return namespace

    def error(self, message):
        for value in sorted(getattr(self, "_secrets", ()), key=len, reverse=True):  # never repeated, whatever the error
            message = message.replace(value, "***")
        raise UsageError(message + self._did_you_mean(message))

    def _secret_values(self, words: list) -> list:
        """The values a command line gives a flag that names a secret or is near one of scalelab's (`--comet_api
        KEY`, `-COMET_API_KEY=KEY`, `—comet_api_key KEY` pasted with a dash): no error repeats them (an error lands
        in a job's log)."""
        secrets = {*KNOWN_SECRETS, *(_flag_name(o) for o, action in self._option_string_actions.items()
                                     if SECRET.search(action.dest))}
        found = []
        for i, word in enumerate(words):
            flag, eq, value = word.partition("=")
            name = _flag_name(flag)
            if name and (SECRET.search(name) or any((len(name) >= 5 and s.startswith(name)) or
                                                    difflib.get_close_matches(name, [s], cutoff=0.75)
                                                    for s in secrets)):
                found.append(value if eq else words[i + 1] if i + 1 < len(words) else "")
        return [value for value in found if value.strip()]

    def _did_you_mean(self, message: str) -> str:
        """' (did you mean --devices?)' for 'unrecognized arguments: --devcies 2': a typo names its own fix."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        for word in message.split(": ", 1)[1].split():
            flag = word.split("=", 1)[0]
            close = difflib.get_close_matches(flag, [o for o in self._option_string_actions if o.startswith("--")],
                                              n=1, cutoff=0.75) if flag.startswith("--") else []
            if close:
                return f" (did you mean {close[0]}?)"
        return ""


def run_main(prog: str, main, argv=None) -> int:
    """Run an entry point; turn UsageError into one stderr line and exit code 2."""
    prog = prog_name(prog)
    try:
        return main(argv) or 0
    except UsageError as exc:
        msg = str(exc).splitlines()[0] if str(exc) else "invalid input"
        print(f"{prog}: error: {msg}", file=sys.stderr, flush=True)
        return 2
    except RunFailed as exc:  # one line here; the traceback is in the run's error.log
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except BrokenPipeError:
        raise  # run_piped's: the reader left
    except OSError as exc:  # a file a flag named that could not be written (a full disk, a folder, a FIFO there)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return 130


SIGPIPE_EXIT = 128 + 13  # what a shell shows for a process that SIGPIPE ended


def run_piped(prog: str, main, argv=None) -> int:
    """run_main for a report, where `benchmark.py ... | head` is normal: when the reader leaves, stop quietly (no
    BrokenPipeError traceback, and no second error when Python flushes stdout at exit: the recipe of Python's
    signal module documentation). The exit status is a Unix tool's killed by SIGPIPE, 141: the shell reports
    head's status for the pipeline, `set -o pipefail` sees that the report was cut, and a failing --reference
    check piped into head is never turned into a 0."""
    try:
        code = run_main(prog, main, argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = SIGPIPE_EXIT
    return code


def human_count(n) -> str:
    """3323392 -> '3.32M': parameter counts a person can read."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(int(n))


def fast_exit(code: int):
    """Exit without Python's module teardown (~1 s with torch and Lightning loaded).

    Only after everything that matters is on disk: result files are fsynced before this, and here the
    standard streams and logging are flushed. Keeps a run's recorded whole-run time honest against the
    wall time a user measures from outside.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


# argparse value types: they raise ArgumentTypeError so the message names the flag.
def number_type(convert, ok, expected: str):
    """An argparse `type=` that converts with `convert` and accepts values where `ok(value)` holds."""

    def parse(text):
        try:
            value = convert(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


unit_fraction = number_type(float, lambda v: 0 <= v < 1, "a number in [0, 1)")  # a probability such as dropout
_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def count(text) -> float:
    """'2e9', '2B', '1.3B', '350M', '100k' -> a positive number (argparse type)."""
    match = re.fullmatch(r"\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", str(text))
    value = float(match.group(1)) * _SUFFIX[match.group(2).upper()] if match else math.nan
    if not 1 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a count such as 2e9, 2B, 1.3B or 350M, got {text!r}")
    return value


def bounded(convert, low, high, why: str):
    """A number from `low` to `high`: an absurd value (100,000 DataLoader workers, a timeout of a year) is refused
    in one line that says the bound and why, before it can fork, allocate or wait."""
    kind, shown = ("an integer", "{:,}") if convert is int else ("a number", "{:g}")
    parse = number_type(convert, lambda v: low <= v <= high,
                        f"{kind} from {shown.format(low)} to {shown.format(high)} ({why})")
    parse.low, parse.high, parse.convert = low, high, convert  # its bounds, for whoever checks values against them
    return parse


def label(what: str, limit: int = 200):
    """An argparse `type=` for a name a user gives that becomes an id, a folder, a logger's name and a console line
    (--run_name, the Comet names): at most `limit` characters, no control character, and nothing a secret-scrubber
    would redact (`api_key=X` in a run name was scrubbed in its own field and travelled everywhere else)."""
    from scalelab.redaction import redact

    def parse(text):
        if len(text) > limit:
            raise argparse.ArgumentTypeError(f"expected {what} of at most {limit} characters, got {len(text):,}")
        if any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 for c in text):
            raise argparse.ArgumentTypeError(f"expected {what} without control characters")
        if redact(text) != text:
            raise argparse.ArgumentTypeError(f"{what} {redact(text)!r} looks like it holds a secret: name it without "
                                             "one (an API key travels in the environment, never in a name)")
        return text

    return parse


# The bounds every entry point shares (one home: a flag's bound is the same in train.py, the benchmark, emulate.py).
DEVICES = bounded(int, 1, 256, "processes on one node, one per device")
NODES = bounded(int, 1, 4096, "nodes of one run")
FORECAST_NODES = bounded(int, 1, 10**6, "nodes a forecast reaches")
THREADS = bounded(int, 1, 1024, "cores of one device")
WORKERS = bounded(int, 0, 64, "DataLoader processes each rank starts")
TIMEOUT_S = bounded(float, 0.001, 86400, "seconds; a longer wait is a hang, the job's time limit ends it first")
STEPS = bounded(int, 1, 10**9, "steps")
PORT = bounded(int, 1024, 65535, "an unprivileged TCP port")
# Quantities several entry points take, each bounded where a value stops being a measurement and starts breaking the
# arithmetic (1e-320 MB buckets, a 1e308 TFLOP/s device: tracebacks and `nan %` before these bounds). Every numeric
# flag of every entry point is one of these or a `bounded` of its own (tests/unit/test_layout.py checks it).
LEARNING_RATE = bounded(float, 1e-12, 10.0, "a learning rate; larger diverges in its first step")
GBIT = bounded(float, 1e-4, 1e5, "Gbit/s of a link, each direction")
GBPS = bounded(float, 1e-6, 1e5, "GB/s")
TFLOPS = bounded(float, 1e-6, 1e6, "TFLOP/s of one device")
MFU = bounded(float, 1e-4, 1.0, "model FLOPs utilisation, a share of the peak: 0.5 for 50 %")
PRICE = bounded(float, 0.0, 1e6, "a price per GPU-hour")
PERCENT = bounded(float, 1e-3, 1e3, "percent")
STEP_SECONDS = bounded(float, 1e-7, 1e5, "seconds one step computes")
LATENCY_US = bounded(float, 0.0, 1e7, "microseconds a ring step waits")
BUCKET_MB = bounded(float, 0.001, 1e5, "MB a gradient bucket holds")
BATCH = bounded(int, 1, 2**20, "samples in one step")
GLOBAL_BATCH = bounded(int, 1, 2**30, "samples in one step over every device")
SEQ_LEN = bounded(int, 1, 2**20, "tokens")
ACCUMULATE = bounded(int, 1, 10**4, "batches a step")
REPEATS = bounded(int, 1, 100, "runs a configuration")


def glue_negative(argv: list, flags) -> list:
    """'--params -2B' -> '--params=-2B' for these flags (and '-inf', '-nan'): argparse would read '-2B' as an unknown
    flag, not as the bad count it is (which the flag's type then refuses in its own words)."""
    out = []
    for arg in argv:
        if out and out[-1] in flags and re.match(r"-(?:[0-9.]|inf|nan)", arg, re.IGNORECASE):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out
