"""An emulated node's torchrun (launch/node.py) says nothing of its own below CRITICAL."""

import subprocess
import sys

from helpers import SRC


def test_every_torchrun_logger_is_quiet_though_each_sets_its_own_level():
    """torch's elastic loggers set their own level (WARNING): quieting their parent let the agent's "Error waiting on
    exit barrier" and its traceback through after a completed run. In a fresh interpreter, as a node runs it."""
    code = ("import logging; from scalelab.launch import node; node.quiet_torchrun(); "
            "names = [n for n in logging.root.manager.loggerDict if n.startswith('torch.distributed.elastic')]; "
            "assert 'torch.distributed.elastic.agent.server.api' in names, names; "
            "loud = [n for n in names if logging.getLogger(n).isEnabledFor(logging.ERROR)]; "
            "assert not loud, loud")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
