"""One emulated node's launcher (emulate.py runs it inside the node's namespace): torchrun, minus its noise.

torchrun reports a failed rank with an error log line and a ChildFailedError traceback, after the rank has already
said why in its own one line. Here that becomes one line naming the rank and its exit code, so a failed
emulated run ends with what the user needs and no traceback wall. gloo's C++ warnings ("hostname of the client
socket cannot be retrieved", harmless inside a namespace) stay quiet through TORCH_CPP_LOG_LEVEL, set by emulate.py.
"""

import logging
import sys

from scalelab.entry import run_main


def main(argv=None) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    quiet_torchrun()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = exc.get_first_failure()
        print(f"emulate.py: node {args.node_rank + 1}: rank {rank} exited with code {failure.exitcode}",
              file=sys.stderr, flush=True)
        return 1
    except SignalException as exc:  # SIGTERM: emulate.py stopping the nodes, or its death (PR_SET_PDEATHSIG)
        print(f"emulate.py: node {args.node_rank + 1}: stopped by {exc.sigval.name}; its ranks were stopped (each "
              "says what it recorded)", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0


def quiet_torchrun():
    """torchrun's own loggers silent but for CRITICAL. Each sets its own level (torch's elastic get_logger: LOGLEVEL,
    else WARNING), so their parent's is not enough: a node whose agent left the exit barrier after the other node's
    agent (which serves the store) had ended logged "Error waiting on exit barrier" and a traceback, after a run that
    completed (a fresh-clone CI run, stop 70)."""
    import torch.distributed.run  # noqa: F401 - imports the agent, its loggers made

    for name in [n for n in logging.root.manager.loggerDict if n.startswith("torch.distributed.elastic")]:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(run_main("emulate.py", main))
