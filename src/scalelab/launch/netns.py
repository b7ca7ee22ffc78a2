"""Emulated nodes on one machine: network namespaces, each with one shaped link into a switch.

A "node" here is a network namespace of its own with one veth (its NIC) whose other end sits on a Linux bridge
in a namespace of its own (the switch). `tc tbf` shapes both ends of each node's veth to the link rate, so every
node sends and receives at that rate whatever the others do: N nodes with one NIC each on a non-blocking switch.
Its ranks reach the other nodes' ranks only through that link. Torch-free; used by launch/emulate.py.

    with emulated_nodes(2, gbit=1.0) as link:      # root: named namespaces (`ip netns list` shows them)
        subprocess.run([*link.prefix(1), "ip", "addr"])   # not root: user namespaces, entered with nsenter

Addresses are 198.51.100.K/24 for node K (TEST-NET-2, RFC 5737: never routed), and only inside the namespaces
made here: nothing is added to the host's own namespace. Names carry this process's pid, so two runs never
collide; teardown always runs (also on Ctrl-C, SIGTERM or a failed setup), and a later run removes the named
namespaces a killed run left behind. A requested latency needs the `netem` qdisc (on each node's end: one delay
per direction); where the kernel has none, the link is set up without it and `Link.notes` says so in one line
(`latency_ms` stays None: not applied).
"""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional

from scalelab.errors import UsageError
from scalelab.launch import link_env
from scalelab.launch.local import exit_on_sigterm

NET = "198.51.100"  # TEST-NET-2: documentation addresses, inside the namespaces only; node K is .K
PREFIX_LEN = 24
MAX_NODES = 16
NS_PREFIX = "scalelab-"  # root path: named namespaces scalelab-<pid>-n1 ... -nN and scalelab-<pid>-sw
SBIN = ("/usr/sbin", "/sbin")  # ip and tc live here, often not on a user's PATH
BURST_MIN_BYTES = 256 * 1024  # tbf bucket: at least one GSO super-packet (64 KiB) several times over
QUEUE_LATENCY = "50ms"  # tbf queue limit, as time at the rate


@dataclass
class Link:
    """The link a run is given: its rate, the latency actually applied, and how to run a command on node k."""
    gbit: float
    latency_requested_ms: Optional[float]
    mode: str  # "root" (named namespaces) or "userns" (unprivileged: user namespaces)
    namespaces: List[str]  # the nodes' (root: names under /run/netns; userns: "pid <holder>"), then the switch's
    ifnames: List[str]  # each node's end of its veth (its NIC); the switch's ends are switch_ifnames
    switch_ifnames: List[str] = field(default_factory=list)
    prefixes: List[List[str]] = field(default_factory=list)
    latency_ms: Optional[float] = None  # applied (None: none asked for, or netem missing)
    notes: List[str] = field(default_factory=list)
    nominal_gbit: Optional[float] = None  # a degraded link: the rate the ranks are told (gbit is what tc applies)

    @property
    def nodes(self) -> int:
        return len(self.ifnames)

    def prefix(self, node: int) -> List[str]:
        """argv prefix that runs a command inside node's namespace (node 1 ... N; N + 1: the switch)."""
        return list(self.prefixes[node - 1])

    def address(self, node: int) -> str:
        return f"{NET}.{node}"

    def env(self, node: int) -> dict:
        """What node's ranks need: gloo's interface, and the link for their result."""
        told = self.gbit if self.nominal_gbit is None else self.nominal_gbit
        shaped = self.gbit if self.nominal_gbit is not None else None
        return {"GLOO_SOCKET_IFNAME": self.ifnames[node - 1],
                **link_env.announce(told, shaped, self.latency_requested_ms, self.latency_ms is not None)}


def tool(name: str) -> str:
    """Path of ip, tc, nsenter, unshare or taskset, or a one-line UsageError."""
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), *SBIN]))
    if not found:
        package = {"ip": "iproute2", "tc": "iproute2"}.get(name, "util-linux")
        raise UsageError(f"emulated nodes need `{name}` (Debian package {package}), which is not installed here")
    return found


def _run(argv, what: str):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if proc.returncode:
        err = (proc.stderr or proc.stdout).strip().splitlines()
        raise UsageError(f"cannot {what}: {err[-1] if err else f'exit code {proc.returncode}'}")
    return proc


@contextlib.contextmanager
def emulated_nodes(nodes: int, gbit: float, latency_ms: Optional[float] = None, nominal_gbit: Optional[float] = None):
    """`nodes` namespaces, each linked into one switch at gbit, for the duration of the block; always torn down.
    nominal_gbit: the rate the ranks are told instead (a degraded link, as a nightly check must catch it)."""
    if not sys.platform.startswith("linux"):
        raise UsageError(f"emulated nodes need Linux network namespaces; this is {sys.platform}")
    if not 2 <= nodes <= MAX_NODES:
        raise UsageError(f"--num_nodes {nodes}: emulate 2 to {MAX_NODES} nodes")
    builder = _RootBuilder(nodes) if os.geteuid() == 0 else _UserBuilder(nodes)
    restore = exit_on_sigterm()
    try:
        link = builder.setup(gbit, latency_ms)
        link.nominal_gbit = nominal_gbit
        yield link
    finally:
        with _signals_deferred():  # a second Ctrl-C or SIGTERM must not cut the teardown short
            builder.teardown()
        restore()


@contextlib.contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM for the block; one that arrived is acted on after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got = []
    previous = {s: signal.signal(s, lambda num, _frame: got.append(num)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if got:
            raise KeyboardInterrupt if got[0] == signal.SIGINT else SystemExit(128 + got[0])


class _Builder:
    """What both paths share: the switch's bridge, each node's veth into it, addresses, shaping. Subclasses make
    the namespaces and the prefixes that enter them (nodes 1..N, then the switch)."""

    def __init__(self, nodes: int):
        self.ip, self.tc, self.nsenter = tool("ip"), tool("tc"), tool("nsenter")
        self.nodes = nodes
        pid = os.getpid()
        # at most 15 characters, as the kernel wants: "sl" + pid (<= 7 digits) + "n"/"s" + node (<= 2)
        self.ifnames = [f"sl{pid}n{k}" for k in range(1, nodes + 1)]
        self.switch_ifnames = [f"sl{pid}s{k}" for k in range(1, nodes + 1)]

    def configure(self, link: Link, switch_netns: str):
        switch = link.prefix(self.nodes + 1)
        link.switch_ifnames = list(self.switch_ifnames)
        _run([*switch, self.ip, "link", "set", "lo", "up"], "bring up lo")
        _run([*switch, self.ip, "link", "add", "br0", "type", "bridge"], "create the switch (a Linux bridge)")
        _run([*switch, self.ip, "link", "set", "br0", "up"], "bring up the switch")
        for node in range(1, self.nodes + 1):
            prefix, nic, port = link.prefix(node), link.ifnames[node - 1], link.switch_ifnames[node - 1]
            _run([*prefix, self.ip, "link", "add", nic, "type", "veth", "peer", "name", port, "netns", switch_netns],
                 f"create node {node}'s link")
            _run([*prefix, self.ip, "link", "set", "lo", "up"], "bring up lo")
            _run([*prefix, self.ip, "addr", "add", f"{link.address(node)}/{PREFIX_LEN}", "dev", nic],
                 "address the node's link")
            _run([*prefix, self.ip, "link", "set", nic, "up"], "bring up the node's link")
            _run([*switch, self.ip, "link", "set", port, "master", "br0"], "attach the link to the switch")
            _run([*switch, self.ip, "link", "set", port, "up"], "bring up the switch's port")
            self.shape(link, prefix, nic, with_latency=True)  # what the node sends
            self.shape(link, switch, port, with_latency=False)  # what the node receives

    def shape(self, link: Link, prefix: List[str], ifname: str, with_latency: bool):
        """tbf at the rate on this end's egress; on a node's end, netem above it for the latency."""
        add = [*prefix, self.tc, "qdisc", "add", "dev", ifname]
        parent = ["root"]
        wanted = with_latency and link.latency_requested_ms is not None
        if wanted and (not link.notes or link.latency_ms is not None):  # the first node's try decides for all
            netem = [*add, "root", "handle", "1:", "netem", "delay", f"{link.latency_requested_ms:g}ms", "limit",
                     "100000"]
            proc = subprocess.run(netem, capture_output=True, text=True, timeout=30)
            if proc.returncode == 0:
                link.latency_ms, parent = link.latency_requested_ms, ["parent", "1:1"]
            elif link.latency_ms is not None:  # it worked on an earlier node
                raise UsageError(f"cannot add the netem delay: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
            else:
                reason = (proc.stderr.strip().splitlines() or ["no netem"])[-1]
                link.notes.append(f"--latency_ms {link.latency_requested_ms:g} cannot be applied: this kernel "
                                  f"has no netem qdisc ({reason}); the link runs without added latency, and the "
                                  "results record it as not applied")
        rate_bytes = link.gbit * 1e9 / 8
        burst = max(BURST_MIN_BYTES, int(rate_bytes / 1000))  # a millisecond at the rate, for fast links
        _run([*add, *parent, "handle", "10:", "tbf", "rate", f"{round(link.gbit * 1e6)}kbit", "burst", str(burst),
              "latency", QUEUE_LATENCY], f"shape the link to {link.gbit:g} Gbit/s with tc tbf")


class _RootBuilder(_Builder):
    """Root: named namespaces (`ip netns add`), entered with nsenter; removed with `ip netns del`."""

    def __init__(self, nodes: int):
        super().__init__(nodes)
        self.names = [f"{NS_PREFIX}{os.getpid()}-n{k}" for k in range(1, nodes + 1)] + [
            f"{NS_PREFIX}{os.getpid()}-sw"]

    def setup(self, gbit, latency_ms) -> Link:
        remove_stale_namespaces(self.ip)
        for name in self.names:
            _run([self.ip, "netns", "add", name], f"create network namespace {name}")
        link = Link(gbit, latency_ms, "root", list(self.names), list(self.ifnames),
                    prefixes=[[self.nsenter, f"--net=/run/netns/{name}"] for name in self.names])
        self.configure(link, self.names[-1])
        return link

    def teardown(self):
        # Every name, made or not (they carry this pid: nobody else's). Deleting a namespace destroys its end
        # of each veth pair, and with it the other end.
        listing = subprocess.run([self.ip, "netns", "list"], capture_output=True, text=True, timeout=30).stdout
        for name in reversed(self.names):
            if re.search(rf"^{re.escape(name)}\b", listing, flags=re.M):
                subprocess.run([self.ip, "netns", "del", name], capture_output=True, timeout=30)


def remove_stale_namespaces(ip: str):
    """Named namespaces of earlier runs whose process is gone (killed with SIGKILL: no teardown ran)."""
    listing = subprocess.run([ip, "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    for name in re.findall(rf"^({re.escape(NS_PREFIX)}(\d+)-(?:n\d+|sw))\b", listing, flags=re.M):
        if not os.path.exists(f"/proc/{name[1]}"):
            subprocess.run([ip, "netns", "del", name[0]], capture_output=True, timeout=30)


class _UserBuilder(_Builder):
    """Not root: a user namespace (we are root inside it) holding two network namespaces, each kept alive by a
    holder process; commands enter them with `nsenter -U -n -t <holder>`. They vanish with their holders, and a
    holder ends by itself within a second when this process is gone."""

    def __init__(self, nodes: int):
        super().__init__(nodes)
        self.unshare = tool("unshare")
        self.holders = []

    def _holder(self, argv) -> int:
        watch = f"while [ -e /proc/{os.getpid()} ]; do sleep 1; done"
        proc = subprocess.Popen([*argv, "sh", "-c", watch], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)  # its own group: teardown ends the holder and its sleep
        self.holders.append(proc)
        deadline = time.time() + 10
        while time.time() < deadline:  # ready once unshare has exec'd the shell, inside the new namespaces
            if proc.poll() is not None:
                raise UsageError(_userns_refused((proc.stderr.read() or b"").decode(errors="replace")))
            if _read(f"/proc/{proc.pid}/comm") == "sh":
                return proc.pid
            time.sleep(0.02)
        raise UsageError("cannot create the namespaces: the holder process did not start within 10 s")

    def setup(self, gbit, latency_ms) -> Link:
        switch = self._holder([self.unshare, "--user", "--map-root-user", "--net"])  # the user ns, the switch
        enter_user = [self.nsenter, "-U", "--preserve-credentials", "-t", str(switch)]
        pids = [self._holder([*enter_user, self.unshare, "--net"]) for _ in range(self.nodes)] + [switch]
        prefixes = [[self.nsenter, "-U", "--preserve-credentials", "-n", "-t", str(pid)] for pid in pids]
        link = Link(gbit, latency_ms, "userns", [f"pid {pid}" for pid in pids], list(self.ifnames), prefixes=prefixes)
        self.configure(link, str(switch))
        return link

    def teardown(self):
        for proc in reversed(self.holders):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.holders = []


def _userns_refused(stderr: str) -> str:
    """Why `unshare --user` failed, in one line."""
    knobs = (("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=0"),
             ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces=0"),
             ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
              "kernel.apparmor_restrict_unprivileged_userns=1, AppArmor's restriction"))
    for path, bad, name in knobs:
        if _read(path) == bad:
            return (f"emulated nodes without root need unprivileged user namespaces, disabled here ({name}); "
                    "run as root or enable them")
    last = (stderr.strip().splitlines() or ["unknown reason"])[-1]
    return f"emulated nodes without root need unprivileged user namespaces, and `unshare --user` failed: {last}"


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None
