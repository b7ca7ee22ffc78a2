"""The declaration published: its JSON Schema (2020-12) and appendix C, both generated from it."""

import json
import sys

import msgspec

from scalelab.record import blocks
from scalelab.record.blocks import ANY, KINDS
from scalelab.record.check import _bare, _info_at, _what
from scalelab.record.kinds import SCHEMA, SCHEMA_VERSION, Block


def json_schema() -> dict:
    """The declaration as a JSON Schema (2020-12): what a result of this version may hold, for any validator."""
    body, defs = msgspec.json.schema_components([ANY])  # its refs: msgspec's own "#/$defs/{name}"
    for name, block in _blocks().items():
        if block.rest is not None and name in defs:  # no rest holds a block (tested): its schema has no $defs
            defs[name]["additionalProperties"] = msgspec.json.schema(block.rest)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://scalelab.invalid/{SCHEMA}/v{SCHEMA_VERSION}.json",
            "title": f"{SCHEMA} version {SCHEMA_VERSION}",
            "description": "What a scalelab result.json holds: every block and field, its unit and bounds",
            **body[0], "$defs": defs}


def leaves(kind: str = "training") -> list:
    """[(dotted path, msgspec type info)] of every declared field of a result of this kind, blocks first-level
    fields included; a list of blocks reads as PATH[] ("ranks[].step_times_s")."""
    out = []

    def walk(info, path):
        for f in info.fields:
            where = f"{path}.{f.encode_name}" if path else f.encode_name
            out.append((where, f.type))
            block, suffix = _struct_in(f.type)
            if block is not None:
                walk(block, where + suffix)
    walk(msgspec.inspect.type_info(KINDS[kind]), "")
    return out


def _struct_in(info) -> tuple:
    """(the StructType a field holds, "" directly or "[]" in a list), else (None, "")."""
    ins = msgspec.inspect
    info = _bare(info)
    if isinstance(info, ins.UnionType):
        for t in info.types:
            found = _struct_in(t)
            if found[0] is not None:
                return found
    if isinstance(info, ins.StructType):
        return info, ""
    if isinstance(info, ins.ListType) and isinstance(_bare(info.item_type), ins.StructType):
        return _bare(info.item_type), "[]"
    return None, ""


def markdown() -> str:
    """Every declared field as a table per kind: path, type and bounds, unit, what it is."""
    lines = [f"# Appendix C: what result.json holds ({SCHEMA} version {SCHEMA_VERSION})", "",
             "Generated from `src/scalelab/record/` by `python -m scalelab.record --markdown` (a test keeps it "
             "current); the JSON Schema of the same declaration: `python -m scalelab.record` "
             "([result.schema.json](result.schema.json)). A field marked *optional* may be missing or null: not "
             "recorded.", ""]
    for kind in KINDS:
        lines += [f"## kind: {kind}", "", "| field | type | unit | required | what it is |", "|---|---|---|---|---|"]
        for path, info in leaves(kind):
            meta = _meta_of(info)
            said = (meta.extra_json_schema or {}) if meta is not None else {}
            doc, unit = said.get("description") or _doc_of(kind, path) or "", said.get("unit", "")
            required = "yes" if not isinstance(_bare(info), msgspec.inspect.UnionType) or not any(
                isinstance(t, msgspec.inspect.NoneType) for t in _bare(info).types) else "optional"
            lines.append(f"| `{path}` | {_what(info)} | {unit} | {required} | {doc.replace('|', '/')} |")
        lines.append("")
        if kind == "training":
            lines += _workload_options()
    return "\n".join(lines)


def _workload_options() -> list:
    """What a workload block's options hold: each workload's options that identify its computation, declared in the
    workload's own module (its WorkloadSpec)."""
    from scalelab import workloads  # torch-free: the specs only

    lines = ["### workload.options: each workload's own options", "",
             "A workload block's `options` hold the options of its workload that identify the computation (its "
             "`WorkloadSpec.identity`, declared in `src/scalelab/workloads/<name>.py`), as the flag gave them; "
             "scalelab's workloads:", "",
             "| field | workload | default | what it is |", "|---|---|---|---|"]
    for spec in workloads.BUILTIN.values():  # not a user's: the appendix is the same wherever it is made
        options = {o.name: o for o in spec.options}
        for name in spec.identity:
            option = options[name]
            what = str(option.argparse.get("help", "")).replace("|", "/")
            lines.append(f"| `workload.options.{name}` | {spec.name} | {option.default!r} | {what} |")
    return lines + [""]


def _meta_of(info):
    ins = msgspec.inspect
    if isinstance(info, ins.UnionType):
        kinds = [t for t in info.types if not isinstance(t, ins.NoneType)]
        return _meta_of(kinds[0]) if len(kinds) == 1 else None
    if isinstance(info, ins.Metadata):
        return info
    return None


def _doc_of(kind: str, path: str) -> str:
    """A block's first docstring line, for a field that holds a block."""
    block, _ = _struct_in(_info_at(KINDS[kind], "." + path.replace("[]", "[0]")))
    return (block.cls.__doc__ or "").split("\n")[0] if block is not None else ""


def _blocks() -> dict:
    return {name: obj for name, obj in vars(blocks).items() if isinstance(obj, type) and issubclass(obj, Block)}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"


def cli(argv=None) -> int:
    """`python -m scalelab.record`: print the JSON Schema of result.json (--markdown: the fields as tables)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--markdown"]):
        sys.stderr.write("usage: python -m scalelab.record [--markdown]\n")
        return 2
    sys.stdout.write(markdown() + "\n" if argv else schema_text())
    return 0

