"""A site's nightly results, made up, for `benchmark.py --history` (chapter 14): 1 and 2 devices each night.

    python benchmarks/nightly_series.py --output_dir outputs/ch14/nightly --nights 120 --planted 90:-0.18

--planted NIGHT:STEP: from that night on the 2-device runs' throughput and busbw are (1 + STEP) times what they were
(-0.18: 18 % slower, a link lost); NIGHT:STEP:UNTIL, until that night (a bad stretch, then fixed); without it the
series has no change. --scatter: the night-to-night sd of log throughput (0.03: 3 %, what make demo's repeats scatter
on a quiet machine).
"""

import argparse
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))
from scalelab.entry import OneLineParser, bounded, glue_negative, run_main  # noqa: E402
from scalelab.testing import nightly  # noqa: E402


def planted(text: str) -> tuple:
    parts = text.split(":")
    try:
        out = int(parts[0]), float(parts[1]), *(int(u) for u in parts[2:])
    except (ValueError, IndexError):
        out = ()
    if len(out) not in (2, 3) or out[0] < 0 or not -1 < out[1] < math.inf or len(out) == 3 and out[2] <= out[0]:
        raise argparse.ArgumentTypeError(f"expected NIGHT:STEP like 90:-0.18, or NIGHT:STEP:UNTIL like 60:-0.2:67 "
                                         f"(NIGHT from 0, STEP above -1, UNTIL after NIGHT), got {text!r}")
    return out


FLAGS = ("--nights", "--planted", "--scatter", "--seed")  # each takes a number, refused below 0 in its words


def main(argv=None):
    p = OneLineParser(prog="nightly_series.py", description=__doc__.split("\n")[0])
    p.add_argument("--output_dir", required=True)
    p.add_argument("--nights", type=bounded(int, 1, 36500, "a century of nights"), default=120)
    p.add_argument("--planted", type=planted, metavar="NIGHT:STEP[:UNTIL]")
    p.add_argument("--scatter", type=bounded(float, 0.0, 1.0, "the sd of log throughput: 0.03 is 3 %"), default=0.03)
    p.add_argument("--seed", type=bounded(int, 0, 2**32 - 1, "NumPy's seeds"), default=0)
    a = p.parse_args(glue_negative(sys.argv[1:] if argv is None else list(argv), FLAGS))
    if a.planted and not a.planted[0] < a.nights >= a.planted[-1]:
        p.error(f"--planted {':'.join(map(str, a.planted))}: its nights must lie within --nights {a.nights}")
    nightly.site(a.output_dir, a.nights, a.planted, a.scatter, a.seed)
    print(f"{2 * a.nights} results of {a.nights} nights in {a.output_dir}" +
          (f"; the 2-device runs {a.planted[1]:+.0%} from night {a.planted[0]}" if a.planted else "") +
          (f" until night {a.planted[2]}" if a.planted and len(a.planted) == 3 else ""))


if __name__ == "__main__":
    sys.exit(run_main("nightly_series.py", main))
