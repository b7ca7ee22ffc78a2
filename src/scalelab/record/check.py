"""A result checked against its declaration: one line naming the first field that does not fit it."""

import functools
import re
import typing

import msgspec

from scalelab.errors import ResultError
from scalelab.record.blocks import ANY, KINDS
from scalelab.record.kinds import PER_BATCH, Block
from scalelab.redaction import inert


def check(data: dict) -> None:
    """Raise ResultError naming the first field of a result (kind known, upgraded) that does not fit its
    declaration, or the first way its fields disagree with one another (`consistent`)."""
    try:
        msgspec.convert(data, KINDS[data["kind"]])
    except msgspec.ValidationError as exc:
        raise ResultError(_say(str(exc), data, typ=KINDS[data["kind"]])) from None
    _rest(KINDS[data["kind"]], data, "")
    consistent(data)


def _rest(typ, value, path: str) -> None:
    """The fields of a block that it does not declare, checked against its `rest` (msgspec ignores them): each
    through a decoder made once per block (msgspec.convert would hash the typing each time)."""
    for block, where, v in _outside(typ, value, path, numbered=True):
        decoder = _layout(block)[2]
        if decoder is None:  # a block without a rest: what it does not declare is not read
            continue
        try:
            try:
                decoder.decode(msgspec.json.encode(v))
            except (TypeError, msgspec.EncodeError):  # a writer's value JSON has no word for: convert says so
                msgspec.convert(v, block.rest)
        except msgspec.ValidationError as exc:
            raise ResultError(_say(str(exc), v, where, block.rest)) from None


def string_keys(value, path: str = "") -> None:
    """Raise ResultError naming the first object of a writer's payload with a key that is not a string: JSON's keys
    are, so only a writer's dict holds one, and neither json.dumps (3 written as "3", unasked) nor msgspec (it names
    no field) says so. A writer's check only: a file read holds none."""
    if isinstance(value, dict):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ResultError(f"{'field ' + _named(path) if path else 'the record'}: a key that is not a string, "
                              f"{_short(bad[0])}")
        for k, v in value.items():
            string_keys(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            string_keys(v, f"{path}[{i}]")


def undeclared(data: dict) -> list:
    """The dotted paths ("ranks[].load_avg") of the fields a result (kind known, upgraded) holds that its
    declaration does not name: what a block's `rest` let through. A writer that adds a field without declaring it
    shows here (the tests hold every fresh and kept result to none). `config` is not
    walked: it is the run's flags as given, declared by the entry's parser (`--help`)."""
    kept = {k: v for k, v in data.items() if k not in ("kind", "config")}
    return sorted({where for _, where, _ in _outside(KINDS[data["kind"]], kept, "", numbered=False)})


def _outside(typ, value, path: str, numbered: bool):
    """(block, path, value) of each field under `value` that its block does not declare, in the file's order, at
    any depth; a list's items at PATH[i] (numbered) or PATH[] (not)."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            yield from _outside(typ, v, f"{path}[{i if numbered else ''}]", numbered)
    elif isinstance(value, dict):
        names, below, _ = _layout(typ)
        for key, v in value.items():
            where = f"{path}.{key}" if path else key
            if key in below:
                yield from _outside(below[key], v, where, numbered)
            elif key not in names:
                yield typ, where, v


_LAYOUTS = {}


def _layout(typ) -> tuple:
    """(the fields a block declares, field -> the Block it holds directly or in a list, a decoder of the fields
    it does not declare): once per block."""
    if typ not in _LAYOUTS:
        hints = typing.get_type_hints(typ, include_extras=True)
        _LAYOUTS[typ] = ({f.encode_name for f in msgspec.inspect.type_info(typ).fields},
                         {name: b for name, hint in hints.items() if (b := _block_in(hint)) is not None},
                         None if typ.rest is None else msgspec.json.Decoder(typ.rest))
    return _LAYOUTS[typ]


def _block_in(hint):
    if isinstance(hint, type) and issubclass(hint, Block):
        return hint
    if typing.get_origin(hint) is dict:
        return None  # a mapping of blocks (fingerprint.wire): no block below has a rest
    for arg in typing.get_args(hint):
        found = _block_in(arg)
        if found is not None:
            return found
    return None


_PATH = re.compile(r" - at `\$(.*)`$")
_TOKEN = re.compile(r"\.[^.\[]+|\[\d+\]|\[\.\.\.\]")  # a step of a msgspec path: .name, [3], [...] (some key)


def _say(message: str, data, base: str = "", typ=None) -> str:
    """msgspec's message as scalelab says it: 'field PATH: expected WHAT, got VALUE' (or 'field PATH missing'),
    WHAT read from the declaration of the field at PATH."""
    found = _PATH.search(message)
    where = found.group(1) if found else ""
    if "[...]" in where:  # msgspec's word for a mapping's key: find which
        where = _keyed(where, data, typ)
    path = _named(base + where)
    missing = re.match(r"Object missing required field `([^`]+)`", message)
    if missing:
        return f"field {path + '.' if path else ''}{missing.group(1)} missing"
    info = _info_at(typ if typ is not None else msgspec.inspect.type_info(ANY), where)
    value = _value_at(data, where)
    what = _what(info) if info is not None else message.split(" - at ")[0]
    return f"field {path}: expected {what}, got {_short(value)}"


def _named(path: str) -> str:
    """A field's path on one line: a key may hold what a terminal obeys, or a newline: shown (as \\xNN, inert's
    way), never obeyed."""
    return inert(path.lstrip(".")).replace("\n", "\\x0a")


def _short(value) -> str:
    text_ = repr(value)
    return text_ if len(text_) <= 40 else text_[:37] + "..."


def _keyed(where: str, data, typ) -> str:
    """A msgspec path with each `[...]` (some key of a mapping) as the key whose value does not fit: msgspec checks
    a mapping's values in order, so the first that fails is the one it meant."""
    ann, out = typ, ""
    for token in _TOKEN.findall(where):
        ann = _member(ann, data)
        if token == "[...]":
            value_type = typing.get_args(ann)[1] if typing.get_origin(ann) is dict else typing.Any
            key = next((k for k, v in data.items() if not _fits(v, value_type)), None) if isinstance(data, dict) \
                else None
            if key is None:
                return out + where[where.index("[...]"):]
            out, data, ann = f"{out}.{key}", data[key], value_type
            continue
        (step,) = _steps(token)
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            return out + token
        out += token
        ann = (typing.get_type_hints(ann, include_extras=True).get(step) if isinstance(ann, type) and issubclass(
            ann, Block) else (typing.get_args(ann) or (typing.Any,))[-1])
    return out


def _member(ann, value):
    """The annotation without Annotated, and of a union the member shaped like the value (a block, a mapping, a
    list)."""
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    if typing.get_origin(ann) is typing.Union:
        for member in typing.get_args(ann):
            bare = _member(member, value)
            origin = typing.get_origin(bare) or bare
            if isinstance(value, dict) and (origin is dict or (isinstance(bare, type) and issubclass(bare, Block))):
                return bare
            if isinstance(value, list) and origin is list:
                return bare
    return ann


def _fits(value, ann) -> bool:
    try:
        msgspec.convert(value, ann)
        return True
    except msgspec.ValidationError:
        return False


def _steps(where: str) -> list:
    return [int(p[1:-1]) if p.startswith("[") else p[1:] for p in _TOKEN.findall(where) if p != "[...]"]


def _value_at(data, where: str):
    for step in _steps(where):
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _info_at(info, where: str):
    """The msgspec type info of the field at a msgspec path ($.a[0].b), or None."""
    if not isinstance(info, msgspec.inspect.Type):
        info = msgspec.inspect.type_info(info)
    for step in _steps(where):
        info = _inside(info, step)
        if info is None:
            return None
    return info


def _inside(info, step):
    ins = msgspec.inspect
    if isinstance(info, ins.Metadata):
        return _inside(info.type, step)
    if isinstance(info, ins.UnionType):
        for t in info.types:
            found = _inside(t, step)
            if found is not None:
                return found
        return None
    if isinstance(step, int):
        return info.item_type if isinstance(info, (ins.ListType, ins.TupleType)) else None
    if isinstance(info, ins.StructType):
        return next((f.type for f in info.fields if f.encode_name == step), None)
    if isinstance(info, ins.DictType):
        return info.value_type
    return None


def _what(info) -> str:
    """A field's declared type in words, as the hand validators said it."""
    ins = msgspec.inspect
    if isinstance(info, ins.Metadata):
        return _what(info.type)
    if isinstance(info, ins.UnionType):
        kinds = [t for t in info.types if not isinstance(t, ins.NoneType)]
        null = " or null" if len(kinds) < len(info.types) else ""
        if len(kinds) == 1:
            return _what(kinds[0]) + ("" if isinstance(_bare(kinds[0]), ins.ListType) else null)
        return ", ".join(_what(k) for k in kinds) + null
    if isinstance(info, (ins.FloatType, ins.IntType)):
        name = "an integer" if isinstance(info, ins.IntType) else "a number"
        hi = info.le
        if info.ge is not None and hi is not None and info.ge == -hi:
            return name
        if info.gt is not None:
            return f"{name} above {info.gt:g}, at most {hi:g}"
        return f"{name} from {info.ge:g} to {hi:g}" if info.ge is not None else name
    if isinstance(info, ins.ListType):
        return f"a list of {info.min_length}" if info.min_length and info.min_length == info.max_length else "a list"
    if isinstance(info, ins.StrType) and info.min_length:
        return "a non-empty string" if info.min_length == 1 else f"a string of {info.min_length} or more characters"
    if isinstance(info, ins.LiteralType):
        return "one of " + ", ".join(map(str, info.values))
    return {ins.StrType: "a string", ins.BoolType: "true or false", ins.StructType: "an object",
            ins.DictType: "an object", ins.NoneType: "null"}.get(type(info), "a value")


def _bare(info):
    return info.type if isinstance(info, msgspec.inspect.Metadata) else info


def consistent(data: dict) -> None:
    """A record checked as a whole: each field may be fine alone and the file still impossible. Its ranks are its
    world (a completed run has every rank's record, a failed one at most that many, each rank once), its nodes
    times devices are its world size, and each rank's per-step lists agree in length."""
    launch = data["launch"]
    world, nodes, devices = launch["world_size"], launch["num_nodes"], launch.get("devices")
    if devices is not None and devices * nodes != world:
        raise ResultError(f"launch: {nodes} node(s) x {devices} device(s) is not its world size {world}")
    ranks = data.get("ranks")
    if data["kind"] != "training" or ranks is None:
        return
    if not isinstance(ranks, list) or len(ranks) > world or (data["status"] == "completed" and len(ranks) != world):
        raise ResultError(f"ranks: {len(ranks) if isinstance(ranks, list) else 'no'} rank record(s) for a "
                          f"{data['status']} run of world size {world}")
    seen = [r.get("rank") for r in ranks if isinstance(r, dict)]
    if len(set(seen)) != len(seen) or any(isinstance(k, int) and k >= world for k in seen):
        raise ResultError(f"ranks: rank numbers {sorted(set(seen), key=str)[:8]} are not ranks of a world of {world}")
    for i, r in enumerate(ranks):
        lengths = {name: len(r[name]) for name in PER_BATCH if isinstance(r.get(name), list)}
        if len(set(lengths.values())) > 1:
            raise ResultError(f"ranks[{i}]: per-batch lists of different lengths ({_short(lengths)})")


def declared(path: str, kind: str = "training") -> bool:
    """Whether a dotted path ("timing.comm.waited_s") names a declared field of a result of this kind (any key of
    a mapping: timing.step_s.median, metrics.train_loss)."""
    return _info_at(_type_info(kind), "." + path) is not None


@functools.lru_cache(maxsize=None)
def _type_info(kind: str):
    """A kind's declaration as msgspec reads it, read once: the report's 63 columns each resolve a path at import
    (read each time, 0.16 s of every report's start)."""
    return msgspec.inspect.type_info(KINDS[kind])


