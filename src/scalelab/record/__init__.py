"""result.json declared once: every block and field, with its unit, its bounds and a line of what it is.

Each block is a msgspec Struct; a field's annotation carries its bounds (Meta ge/le/max_length), its doc and unit
(Meta description and the JSON Schema's "unit"), and a default of None where it may be missing or null ("not
recorded", as every reader takes it). A block that holds more than it declares (a workload's lever fields, a rank's
figures) says what else it may hold in `rest`. `check` validates a result (kind known) against this declaration and
fails with one line naming the field; `json_schema` publishes the same declaration for other tools
(`python -m scalelab.record`). The builders that fill these blocks: train/payload.py (training), bench/allreduce.py
(the all-reduce benchmark), launch/cluster.py (launch), launch/slurm_env.py (slurm), measure/timing.py (timing and
its comm), measure/devices.py (devices), fingerprint.py (fingerprint), train/clock.py and train/probe.py (a rank).
workload, launch, launch.link, slurm, fingerprint, timing, timing.comm and timing.devices are built as their blocks
(a field a builder misspells fails where it is built) and `plain` turns them into what the file holds as
results.write writes (a field left at None is left out: readers take null and left out alike); a rank's record is
still a dict.
Older versions are upgraded to this one before they are checked (upgrades.py).
"""

from scalelab.record.blocks import (
                                    KINDS,
                                    Allreduce,
                                    BenchConfig,
                                    Comm,
                                    Devices,
                                    Fingerprint,
                                    Launch,
                                    Link,
                                    Rank,
                                    Result,
                                    Row,
                                    Slurm,
                                    Timing,
                                    Training,
                                    Wire,
                                    Workload,
)
from scalelab.record.check import check, consistent, declared, string_keys, undeclared
from scalelab.record.kinds import MAX_SPAN_STEPS, MAX_STEPS, PER_BATCH, SCHEMA, SCHEMA_VERSION, plain
from scalelab.record.publish import json_schema, leaves, markdown

__all__ = ["KINDS", "Allreduce", "BenchConfig", "Comm", "Devices", "Fingerprint", "Launch", "Link", "Rank", "Result",
           "Row", "Slurm", "Timing", "Training", "Wire", "Workload", "check", "consistent", "declared", "leaves",
           "MAX_SPAN_STEPS", "MAX_STEPS", "PER_BATCH", "SCHEMA", "SCHEMA_VERSION", "json_schema", "markdown", "plain",
           "string_keys", "undeclared"]
