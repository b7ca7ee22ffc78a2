"""A miniature cluster: emulated nodes on one machine, each with a real, rate-limited link (src/emulate.py).

    python src/emulate.py --num_nodes 2 --devices 1 --link_gbit 1 -- src/train.py --model gpt --preset tiny
    python src/emulate.py --num_nodes 4 --link_gbit 0.2 -- src/allreduce_bench.py --min_bytes 1M --max_bytes 4M

Each node is a network namespace (launch/netns.py) with its own share of the cores (`taskset`; with more nodes
than cores they take turns: node K on core K mod cores); one `torchrun --nnodes N --node_rank K` per node starts
its ranks there, and gloo reaches the other nodes only through the node's link into a switch, which `tc tbf`
shapes to --link_gbit in each direction. The ranks get SCALELAB_LINK=emulated and SCALELAB_LINK_GBIT, so
their result records the link (launch.link) and the report never shows this as a real network. When one node
fails the other is stopped; the namespaces are torn down in every case. Torch-free: torchrun runs in the nodes.
"""

import argparse
import os
import subprocess
import sys

from scalelab.entry import DEVICES, PORT, OneLineParser, bounded, run_main
from scalelab.errors import UsageError
from scalelab.launch import netns
from scalelab.launch.local import die_with_parent, supervise
from scalelab.perfmodel.network import human_rate

PROG = "emulate.py"
NODES = 2
SRC_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # `-m scalelab...` imports it
_NODES = bounded(int, 1, 16, "emulated nodes: each a network namespace and its ranks on this one machine")
_GBIT = bounded(float, 0.001, 1000, "Gbit/s each direction, what tc shapes")
GRACE_S = 10.0  # after one node failed, the other may end by itself this long before it is stopped
EXAMPLES = """examples (CPU, gloo; the flags after -- are the script's own):
  python src/emulate.py --num_nodes 2 --devices 1 --link_gbit 1 -- src/train.py --model gpt --preset tiny \\
      --max_steps 30 --output_dir outputs/emulated
  python src/emulate.py --link_gbit 1 -- src/allreduce_bench.py --min_bytes 1M --max_bytes 16M \\
      --output_dir outputs/emulated
  python src/emulate.py --num_nodes 4 --link_gbit 0.2 -- src/allreduce_bench.py --min_bytes 1M --max_bytes 4M \\
      --output_dir outputs/emulated
  scalelab-emulate --link_gbit 0.2 -- -m scalelab.train --model gpt   # from an installed scalelab
Root uses named network namespaces; any other user, unprivileged user namespaces (where the system allows them)."""


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, epilog=EXAMPLES,
                      usage="%(prog)s [options] -- SCRIPT.py | -m MODULE [its arguments]",
                      description="Run a scalelab script on emulated nodes of this machine: one network namespace "
                                  "and one torchrun per node, each node linked into a switch at --link_gbit (tc).")
    p.add_argument("--num_nodes", type=_NODES, default=NODES,
                   help=f"emulated nodes, 2 to {netns.MAX_NODES} (more nodes than cores: they share cores, which "
                        "slows compute, not a link-bound transfer)")
    p.add_argument("--nodes", dest="num_nodes", type=_NODES, default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS)  # its name before one name per quantity: still read
    p.add_argument("--devices", type=DEVICES, default=1,
                   help="ranks per node (torchrun --nproc_per_node); the node's cores are shared among them")
    p.add_argument("--link_gbit", type=_GBIT, default=1.0,
                   help="rate of each node's link in Gbit/s, each direction (default 1)")
    p.add_argument("--latency_ms", type=bounded(float, 0, 10000, "one-way delay in ms"),
                   help="one-way delay added in each direction (needs the netem qdisc; said and recorded when the "
                        "kernel has none)")
    p.add_argument("--degrade_gbit", type=_GBIT,
                   help="shape the link to this lower rate while the ranks are told --link_gbit: rehearses a link "
                        "that gives less than it should (a port negotiated down, a bad cable), what a nightly "
                        "benchmark.py --reference check must catch; the result records both rates")
    p.add_argument("--master_port", type=PORT, default=29500,
                   help="rendezvous port on node 1 (its namespace is fresh: any port is free; default 29500)")
    return p


def split_argv(argv):
    """(emulate's own flags, the command after `--`)."""
    if "--" not in argv:
        build_parser().parse_args(argv)  # --help, or a bad flag, first
        raise UsageError("give the script to run after --, e.g. `python src/emulate.py --link_gbit 1 -- "
                         "src/allreduce_bench.py`")
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def check_command(command):
    """A script (src/train.py) or `-m MODULE` (scalelab.train), as torchrun takes them."""
    if not command:
        raise UsageError("nothing to run after --: give a script such as src/train.py or src/allreduce_bench.py")
    if command[0] in ("-m", "--module"):
        import importlib.util

        if len(command) < 2 or importlib.util.find_spec(command[1].split(".")[0]) is None:
            raise UsageError(f"{' '.join(command[:2])}: no such module here (torchrun runs it on each node)")
        return command
    if not command[0].endswith(".py") or not os.path.isfile(command[0]):
        raise UsageError(f"{command[0]} is not a Python script here (torchrun runs it on each node)")
    return command


def node_cores(nodes: int):
    """Each node's own share of this process's cores, as taskset lists ("0", "1" on 2 cores); with fewer
    cores than nodes, node K takes core K mod cores (nodes 1 and 3 share the first, ...)."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if len(cores) < nodes:
        return [str(cores[k % len(cores)]) for k in range(nodes)]
    per = len(cores) // nodes
    return [",".join(map(str, cores[k * per:(k + 1) * per])) for k in range(nodes)]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own, command = split_argv(argv)
    args = build_parser().parse_args(own)
    if not 2 <= args.num_nodes <= netns.MAX_NODES:
        raise UsageError(f"--num_nodes {args.num_nodes}: emulate 2 to {netns.MAX_NODES} nodes")
    if args.degrade_gbit is not None and args.degrade_gbit >= args.link_gbit:
        raise UsageError(f"--degrade_gbit {args.degrade_gbit:g} must be below --link_gbit {args.link_gbit:g} "
                         "(the rate the link claims)")
    check_command(command)
    taskset = netns.tool("taskset")
    cores = node_cores(args.num_nodes)
    have = len(cores[0].split(","))
    if args.devices > have and "--oversubscribe" not in command:
        raise UsageError(f"--devices {args.devices} per node needs {args.devices} cores per node but each emulated "
                         f"node has {have} (cores {' and '.join(cores)}): use --devices {have}, or pass "
                         "--oversubscribe to the script to run anyway")
    shaped = args.link_gbit if args.degrade_gbit is None else args.degrade_gbit
    with netns.emulated_nodes(args.num_nodes, shaped, args.latency_ms,
                              nominal_gbit=args.degrade_gbit and args.link_gbit) as link:
        for note in link.notes:
            print(f"{PROG}: warning: {note}", file=sys.stderr, flush=True)
        print(banner(args, link, cores), flush=True)
        procs = [start_node(link, k, args, command, [taskset, "-c", cores[k - 1]])
                 for k in range(1, args.num_nodes + 1)]
        return wait_nodes(procs)


def banner(args, link, cores) -> str:
    rate = human_rate(args.link_gbit)
    if args.degrade_gbit is not None:
        rate += f" (degraded: shaped to {human_rate(args.degrade_gbit)}; the ranks record {rate})"
    latency = f", +{link.latency_ms:g} ms each way" if link.latency_ms is not None else ""
    where = ", ".join(f"node {k} on core(s) {c}" for k, c in enumerate(cores, 1))
    shared = " (nodes share cores: more nodes than cores)" if len(set(cores)) < len(cores) else ""
    return (f"{PROG}: {args.num_nodes} nodes x {args.devices} device(s), each linked into a switch by an emulated "
            f"{rate} link{latency} ({link.mode}: namespaces {', '.join(link.namespaces)}; tc tbf on both ends of "
            f"each link); {where}{shared}")


def start_node(link, k: int, args, command, pin) -> subprocess.Popen:
    """torchrun (launch/node.py: one line where torchrun prints a traceback) for node k (1 ... N) inside its
    namespace, pinned to its cores."""
    torchrun = [sys.executable, "-m", "scalelab.launch.node", "--nnodes", str(args.num_nodes), "--nproc_per_node",
                str(args.devices), "--node_rank", str(k - 1), "--master_addr", link.address(1), "--master_port",
                str(args.master_port)]
    # each rank pins itself within the node's cores; gloo's C++ warnings stay quiet (errors still print)
    env = {**os.environ, **link.env(k), "PYTHONUNBUFFERED": "1", "TORCH_CPP_LOG_LEVEL": "ERROR",
           "PYTHONPATH": os.pathsep.join(p for p in (SRC_ROOT, os.environ.get("PYTHONPATH")) if p)}
    # SIGTERM to the node when this process dies without its cleanup (kill -9): its torchrun stops its ranks. (The
    # kernel drops this where entering a user namespace changes the credentials: there the namespaces' holders end
    # instead, and with them the nodes' network.)
    return subprocess.Popen([*link.prefix(k), *pin, *torchrun, *command], env=env, preexec_fn=die_with_parent)


def wait_nodes(procs) -> int:
    """Wait for every node; stop the others when one fails. The nodes' common exit code when each ended by itself
    (torchrun printed why), else RunFailed naming the node that failed first."""
    return supervise(procs, GRACE_S, lambda k, how, stopped: f"node {k + 1} (its torchrun) {how}"
                     + ("; stopped the other node(s)" if stopped else ""))


def cli():
    """Console-script entry point (see setup.cfg), and `python -m scalelab.launch.emulate`."""
    sys.exit(run_main(PROG, main))


if __name__ == "__main__":
    cli()
