"""Every field a reader takes from a result is one the declaration names (scalelab/record/): read in the source.

A reader that indexes a result's dict (`run["launch"]["world_size"]`, `(r.get("slurm") or {}).get("job_id")`) gets
nothing from the declaration: a misspelt or undeclared key reads as missing, a column stays empty, a claim says
SKIP, and a file holding a wrong value there is never refused (the declaration checks only what it names; before
this test, `config.collective` of a benchmark was read and never declared). The test walks scalelab's source (and
benchmarks/, reframe/) with `ast` and follows each chain of keys through the declaration's types, failing on a key
that no block on its way declares (module, function, line, path). A chain is followed from:
- a key that is a result's section (`x["timing"]["comm"]`): the keys under it;
- a name its scope indexes by two or more sections (a whole result, or a list of them): every key, the first too;
- a name bound to a part of one (`t = run["timing"]`, `:=`, `for r in run["ranks"]`, comprehensions, `enumerate`,
  `zip`, `a or b`, `x if c else None`, `max`/`sorted` of a list), in the order Python binds it;
- what results.py's loaders give, a rank's record where a run builds it (`ctx.rank_record()`, `gather(...)`:
  RETURNS), and what a function of scalelab returns where its returns give a part of a result (selfcheck's
  `newest`);
- a parameter that a caller in scalelab passes a part of one to (`_problem(r)`, `fingerprint.differences(a, b)`,
  by place or by name), and a lambda's (a report column's reader).
Not followed, so not checked: the first key of a name indexed by one section only where nothing says it is a
result; keys of a declared mapping (`metrics`, a benchmark's `summary`: any key); a dict a reader builds anew (the
report's light rows and frames, whose columns test_record.py resolves through `at()`); a method's parameters and a
nested function's free names; functions passed by name (`map(f, ranks)`, `key=f`). upgrades.py reads the older
layouts on purpose and is not walked.
"""

import ast
import pathlib

import msgspec.inspect as mi
import pytest

from helpers import SRC
from scalelab import record

PACKAGE = pathlib.Path(SRC) / "scalelab"
OLDER_LAYOUTS = {"upgrades.py"}  # it reads what earlier versions wrote, then rewrites it as this one declares
OTHER_READERS = ("benchmarks", "reframe")  # beside src/: scripts that read results too
RESULT = mi.UnionType((mi.type_info(record.Training), mi.type_info(record.Allreduce)))
# Where a result or a part of one comes from: results.py's loaders, a rank's record as its run builds it, and the
# ranks' records gathered (train/payload.py); what they give is followed into every function it is handed to.
RANK = mi.type_info(record.Rank)
RETURNS = {("method", "rank_record"): RANK, ("scalelab.train.payload", "gather"): mi.ListType(RANK),
           ("scalelab.results", "scan"): mi.TupleType((mi.ListType(RESULT), mi.ListType(mi.AnyType()))),
           ("scalelab.results", "load"): RESULT, ("scalelab.results", "parse"): RESULT}
OPEN = "any key"  # a mapping or an Any: whatever it holds is not declared field by field


def _types(t) -> list:
    """t's alternatives, each without its Meta (bounds, doc) and without None."""
    out = []
    for m in (t.types if isinstance(t, mi.UnionType) else (t,)):
        while isinstance(m, mi.Metadata):
            m = m.type
        if isinstance(m, mi.UnionType):
            out += _types(m)
        elif not isinstance(m, mi.NoneType):
            out.append(m)
    return out


def step(t, key):
    """The type under `key` (a str: a field or a mapping's key; an int: a list's item), OPEN where anything may
    be there, None where nothing declares it. Where one kind of result declares a block and another leaves the
    field open (a benchmark's config, a training run's flags), the block decides: a reader that takes a key the
    block does not name reads what no check holds to anything."""
    if t == OPEN:
        return OPEN
    found, kinds, open_ = [], _types(t), False
    for m in kinds:
        if isinstance(m, mi.StructType) and isinstance(key, str):
            found += [f.type for f in m.fields if f.encode_name == key]
            if key == m.tag_field:  # "kind": the tag that picks the result's declaration
                found.append(mi.StrType())
        elif isinstance(m, mi.DictType) and isinstance(key, str):
            if isinstance(m.value_type, mi.AnyType):
                open_ = True
            else:
                found.append(m.value_type)
        elif isinstance(m, (mi.ListType, mi.VarTupleType)) and isinstance(key, int):
            found.append(m.item_type)
        elif isinstance(m, mi.TupleType) and isinstance(key, int) and -len(m.item_types) <= key < len(m.item_types):
            found.append(m.item_types[key])  # results.scan(folder)[0]
    if found:
        return found[0] if len(found) == 1 else mi.UnionType(tuple(found))
    declared = any(isinstance(m, (mi.StructType, mi.ListType, mi.TupleType)) for m in kinds)
    return OPEN if open_ or (not declared and any(isinstance(m, mi.AnyType) for m in kinds)) else None


def _bare(node):
    """`(x or {})` and `(x or [])` as x: a reader's guard for a section left out."""
    while (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or) and len(node.values) == 2
           and isinstance(node.values[1], (ast.Dict, ast.List)) and not getattr(node.values[1], "keys", None)
           and not getattr(node.values[1], "elts", None)):
        node = node.values[0]
    return node


def _key(node):
    """(what is indexed, the key) of x["k"], x[0], x.get("k"[, default]); (None, None) for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, (str, int)) and not isinstance(node.slice.value, bool):
        return _bare(node.value), node.slice.value
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.UnaryOp) and isinstance(node.slice.op, ast.USub) \
            and isinstance(node.slice.operand, ast.Constant) and isinstance(node.slice.operand.value, int):
        return _bare(node.value), -node.slice.operand.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return _bare(node.func.value), node.args[0].value
    return None, None


def _chain(node) -> tuple:
    """(the root expression, its keys in order) of a chain of keys; keys [] where node indexes nothing."""
    keys = []
    node = _bare(node)
    while True:
        base, key = _key(node)
        if base is None:
            return node, keys[::-1]
        keys.append(key)
        node = base


class Reads:
    """The chains of keys one scope (a module's top level or one function) reads from results, and the names it
    binds to a part of one."""

    def __init__(self, where: str, returned=lambda call: None, results=None):
        self.where, self.bound, self.checked, self.undeclared = where, {}, 0, []
        self.returned = returned  # what a call gives where it gives a part of a result (RETURNS), else None
        self.results = results or {}  # names this scope reads as a whole result (or a list of them)
        self.bound.update(self.results)

    def resolve(self, node, report: bool):
        """The declared type node reads (None: not a part of a result, or not known to be)."""
        root, keys = _chain(node)
        if isinstance(root, ast.Name) and root.id in self.bound:
            t = self.bound[root.id]
        else:
            t = self._made(root)
        if t is None:
            lead = _lead(keys)
            if lead is None or step(RESULT, keys[lead]) is None:  # found[0]["launch"]: a list's result
                return None
            t = _listed(RESULT, lead)
        for i, key in enumerate(keys):
            if isinstance(key, str) and key.startswith("_"):
                return None  # a reader's own mark (_path, _row): results.validate drops any a file holds
            t = step(t, key)
            if t is None:
                if report:
                    self.undeclared.append((node.lineno, self._say(root, keys[:i + 1])))
                return None
        if report and keys:
            self.checked += 1
        return t

    def _made(self, node):
        """What an expression that is no chain gives: a call (RETURNS, a function of scalelab's whose returns were
        followed, max/min/next of a list: its item, sorted/list/reversed: the list), `a if c else b` and `a or b`
        where every side gives the same (None aside), a list comprehension of a part ([r for r in found if ...]), a
        list of parts ([ctx.rank_record()])."""
        if isinstance(node, ast.Call):
            if (t := self.returned(node)) is not None:
                return t
            if isinstance(node.func, ast.Name) and node.args and node.func.id in _SAME_LIST + _AN_ITEM:
                t = self.resolve(node.args[0], report=False)
                if t is not None and t != OPEN and node.func.id in _AN_ITEM:
                    t = step(t, 0)
                return None if t == OPEN else t
            return None
        if isinstance(node, (ast.IfExp, ast.BoolOp)):  # a if c else b, a or b: what both give
            sides = [self.resolve(s, report=False) for s in
                     ((node.body, node.orelse) if isinstance(node, ast.IfExp) else node.values)
                     if not (isinstance(s, ast.Constant) and s.value is None)]
            return sides[0] if sides and all(x is not None and x != OPEN and x == sides[0] for x in sides) else None
        if isinstance(node, ast.ListComp):  # its names are bound by now (a comprehension binds before it ends)
            t = self.resolve(node.elt, report=False)
            return None if t is None or t == OPEN else mi.ListType(t)
        if isinstance(node, ast.List) and node.elts:
            items = [self.resolve(e, report=False) for e in node.elts]
            same = items[0] is not None and items[0] != OPEN and all(i == items[0] for i in items)
            return mi.ListType(items[0]) if same else None
        return None

    @staticmethod
    def _say(root, keys) -> str:
        name = root.id if isinstance(root, ast.Name) else "..."
        return name + "".join(f"[{k!r}]" for k in keys)


def _lead(keys):
    """Where the first key that is a name sits (found[0]["launch"]: 1), None where all are places."""
    return next((i for i, k in enumerate(keys) if not isinstance(k, int)), None)


def _listed(t, depth: int):
    """t in `depth` lists."""
    for _ in range(depth):
        t = mi.ListType(t)
    return t


def _merge(was, t):
    """was or t: one type where they are one."""
    old = _types(was) if was is not None else []
    both = old + [m for m in _types(t) if m not in old]
    return both[0] if len(both) == 1 else mi.UnionType(tuple(both))


def _bind(reads: Reads, target, value, items: bool) -> None:
    """target = value (items: for target in value) where value is a part of a result: the name keeps its type."""
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        for t, v in zip(target.elts, value.elts):
            _bind(reads, t, v, items)
        return
    if items and isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and not value.keywords \
            and isinstance(target, ast.Tuple):
        if value.func.id == "enumerate" and len(value.args) == 1 and len(target.elts) == 2:
            return _bind(reads, target.elts[1], value.args[0], items)  # for i, r in enumerate(ranks)
        if value.func.id == "zip" and len(value.args) == len(target.elts):
            for t, v in zip(target.elts, value.args):  # for r, step in zip(ranks, steps)
                _bind(reads, t, v, items)
            return
    if isinstance(target, ast.Tuple) and not items:  # found, skipped = results.scan(folder)
        t = reads.resolve(value, report=False)
        parts = _types(t)[0] if t not in (None, OPEN) else None
        if isinstance(parts, mi.TupleType) and len(parts.item_types) == len(target.elts):
            for name, part in zip(target.elts, parts.item_types):
                if isinstance(name, ast.Name):
                    reads.bound[name.id] = part
            return
    if not isinstance(target, ast.Name):
        return
    t = reads.resolve(value, report=False)
    if t is not None and items:
        t = step(t, 0)
    if t is None or t == OPEN:
        if target.id in reads.results:  # for r in found: what found is, unknown; how r is read says
            reads.bound[target.id] = reads.results[target.id]
        else:
            reads.bound.pop(target.id, None)  # rebound to something else: no longer followed
    else:
        reads.bound[target.id] = t


_AN_ITEM, _SAME_LIST = ("max", "min", "next"), ("sorted", "list", "reversed")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _own(body) -> list:
    """The nodes of a body, not those of the functions and classes it defines."""
    stack, out = [n for n in body if not isinstance(n, _SCOPES)], []
    while stack:
        node = stack.pop()
        out.append(node)
        stack += [child for child in ast.iter_child_nodes(node) if not isinstance(child, _SCOPES)]
    return out


# The sections of a result that are blocks: a name whose key is one of them is read as a whole result throughout
# its scope (its other keys too, the first included). `config` is left out: a word too many dicts use.
BLOCKS = {f.encode_name for kind in (record.Training, record.Allreduce) for f in mi.type_info(kind).fields
          if any(isinstance(m, (mi.StructType, mi.ListType)) for m in _types(f.type))} - {"config"}


def _results(nodes) -> dict:
    """The names a scope indexes by two or more of a result's block sections (one alone: a word other records use
    too, a reference's `workload`, a frame's `rows`): whole results, or lists of them (name -> how deep)."""
    seen = {}
    for node in nodes:
        root, keys = _chain(node)
        lead = _lead(keys)
        if isinstance(root, ast.Name) and lead is not None and keys[lead] in BLOCKS:
            seen.setdefault((root.id, lead), set()).add(keys[lead])
    return {name: _listed(RESULT, depth) for (name, depth), sections in seen.items() if len(sections) > 1}


def _events(nodes) -> list:
    """What a scope does, in the order Python runs it: a name is bound after its value is read (x = ...), a loop's
    and a comprehension's names before their body reads them; each chain read once, at its outermost key; each
    call, to pass what its arguments are to the function it calls."""
    inner = {id(_bare(base)) for node in nodes for base in [_key(node)[0]] if base is not None}
    out = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            out += [((node.end_lineno, node.end_col_offset), "bind", t, node.value, False) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            out.append(((node.end_lineno, node.end_col_offset), "bind", node.target, node.value, False))
        elif isinstance(node, ast.For):
            out.append(((node.lineno, node.col_offset), "bind", node.target, node.iter, True))
        elif isinstance(node, _COMPREHENSIONS):
            out += [((node.lineno, node.col_offset), "bind", g.target, g.iter, True) for g in node.generators]
        elif isinstance(node, ast.Call):
            out.append(((node.end_lineno, node.end_col_offset), "call", node, None, None))
        elif isinstance(node, ast.Return) and node.value is not None:
            out.append(((node.end_lineno, node.end_col_offset), "return", node.value, None, None))
        if id(node) not in inner and _key(node)[0] is not None:
            out.append(((node.lineno, node.col_offset), "read", node, None, None))
    order = {"call": 0, "bind": 1, "read": 2, "return": 3}  # r = f(r): f gets the r read before the name is bound again
    return sorted(out, key=lambda e: (e[0], order[e[1]]))


class Program:
    """scalelab's modules read together: what a function's caller passes it (a result, a section, a rank) is what
    its parameter reads as, in the module that defines it or one that imports it from scalelab."""

    def __init__(self, sources: dict):
        self.trees = {module: ast.parse(source) for module, source in sources.items()}
        self.defs = {(m, f.name): f for m, tree in self.trees.items() for f in tree.body
                     if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.names = {m: self._imports(m, tree) for m, tree in self.trees.items()}
        self.params = {}  # (module, function) -> {parameter: the type a caller passed}
        self.gives = {}  # (module, function) -> what its returns give, where each is a part of a result

    def _imports(self, module: str, tree) -> dict:
        """name in this module -> ("module", dotted) or ("function", (module, name)), for scalelab's own."""
        out = {name: ("function", (module, name)) for m, name in self.defs if m == module}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "scalelab":
                for alias in node.names:
                    dotted = f"{node.module}.{alias.name}"
                    out[alias.asname or alias.name] = (("module", dotted) if dotted in self.trees else
                                                       ("function", (node.module, alias.name)))
        return out

    def _callee(self, module: str, func):
        if isinstance(func, ast.Name):
            kind, what = self.names[module].get(func.id, (None, None))
            return what if kind == "function" and what in self.defs else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            kind, what = self.names[module].get(func.value.id, (None, None))
            return (what, func.attr) if kind == "module" and (what, func.attr) in self.defs else None
        return None

    def _returned(self, module: str):
        def returned(call):
            func = call.func
            if isinstance(func, ast.Attribute) and ("method", func.attr) in RETURNS:
                return RETURNS["method", func.attr]
            callee = self._callee(module, func) or ("", "")
            return RETURNS.get(callee) or self.gives.get(callee)
        return returned

    def _give(self, reads: Reads, function: tuple, value) -> None:
        """A function whose returns give parts of a result gives what they give (a part and a None: the part)."""
        if function not in self.defs or (isinstance(value, ast.Constant) and value.value is None):
            return
        t = reads.resolve(value, report=False)
        if t is not None and t != OPEN:
            self.gives[function] = _merge(self.gives.get(function), t)

    def _pass(self, reads: Reads, module: str, call) -> None:
        """What call's arguments are, to its callee's parameters (several callers: any of what they pass)."""
        callee = self._callee(module, call.func)
        if callee is None:
            return
        spec = self.defs[callee].args
        by_place = [a.arg for a in spec.posonlyargs + spec.args]
        by_name = {a.arg for a in spec.args + spec.kwonlyargs}
        given = list(zip(by_place, call.args)) + [(k.arg, k.value) for k in call.keywords if k.arg in by_name]
        for name, value in given:
            t = None if isinstance(value, ast.Starred) else reads.resolve(value, report=False)
            if t is None or t == OPEN:
                continue
            kinds = self.params.setdefault(callee, {})
            kinds[name] = _merge(kinds.get(name), t)

    def scopes(self):
        """(module, function or None, its own nodes) of every scope."""
        for module, tree in self.trees.items():
            yield module, None, _own(tree.body)
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield module, node, _own(node.body)
                elif isinstance(node, ast.Lambda):  # a column's reader: lambda r: r["timing"].get("had_cpu")
                    yield module, node, _own([node.body])

    def reads(self) -> list:
        """A Reads per scope, once what each parameter is stops growing."""
        for _ in range(10):
            before = ({k: dict(v) for k, v in self.params.items()}, dict(self.gives))
            out = []
            for module, func, nodes in self.scopes():
                name = getattr(func, "name", "<lambda>" if func else "<module>")
                reads = Reads(f"{module}:{name}", self._returned(module), _results(nodes))
                if self.defs.get((module, name)) is func:
                    reads.bound.update(self.params.get((module, name), {}))
                for _, what, node, value, items in _events(nodes):
                    if what == "bind":
                        _bind(reads, node, value, items)
                    elif what == "call":
                        self._pass(reads, module, node)
                    elif what == "return":
                        self._give(reads, (module, name), node)
                    else:
                        reads.resolve(node, report=True)
                out.append(reads)
            if before == (self.params, self.gives):
                return out
        raise AssertionError("what the parameters are did not settle")


def reads_of(source: str, where: str) -> list:
    """A Reads per scope of one module's source, read alone."""
    return Program({where: source}).reads()


def _modules() -> dict:
    """scalelab's modules by dotted name, their sources (upgrades.py, older layouts, and record/ itself left out),
    and the repository's other readers of results: benchmarks/ and ReFrame's checks (reframe/)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if path.name not in OLDER_LAYOUTS and parts[0] != "record":
            dotted = ".".join(("scalelab", *parts[:-1], *([] if parts[-1] == "__init__" else [parts[-1]])))
            out[dotted] = path.read_text(encoding="utf-8")
    for folder in OTHER_READERS:
        for path in sorted((PACKAGE.parent.parent / folder).glob("*.py")):
            out[f"{folder}.{path.stem}"] = path.read_text(encoding="utf-8")
    return out


def test_every_field_a_reader_takes_from_a_result_is_declared():
    """Each chain of keys into a result, in every module, names declared fields only."""
    checked, undeclared = 0, []
    for reads in Program(_modules()).reads():
        checked += reads.checked
        undeclared += [f"{reads.where} line {line}: {said}" for line, said in reads.undeclared]
    assert not undeclared, "read but not declared in scalelab/record/:\n" + "\n".join(undeclared)
    assert checked >= 400, f"only {checked} reads followed: the walk no longer finds the readers"


@pytest.mark.parametrize("source, said", [
    ('def f(run):\n    return run["launch"]["world_sise"]\n', "run['launch']['world_sise']"),
    ('def f(run):\n    return (run.get("slurm") or {}).get("jobid")\n', "run['slurm']['jobid']"),
    ('def f(run):\n    t = run["timing"]\n    return t.get("mfu"), t["comm"].get("waited")\n',
     "t['comm']['waited']"),
    ('def f(run):\n    for r in run["ranks"]:\n        d = r["devices"]\n        yield d["util_avg"]\n',
     "d['util_avg']"),
    ('def f(run):\n    return [r.get("stepp_times_s") for r in run.get("ranks") or []]\n',
     "r['stepp_times_s']"),
    ('def f(runs):\n    return runs[0]["ranks"][0]["devices"]["source"], runs[0]["ranks"][-1]["devise"]\n',
     "runs[0]['ranks'][-1]['devise']"),
    ('def f(bench):\n    return (bench.get("config") or {}).get("collectiv")\n', "bench['config']['collectiv']"),
    ('def f(run):\n    return run["launch"]["world_size"], run["workload"]["model"], run["timng"]["mfu"]\n',
     "run['timng']"),
    ('def f(found):\n    return found[0]["launch"], found[0]["timing"], found[-1].get("satus")\n',
     "found[-1]['satus']"),
    ('COLUMNS = [("mfu", lambda r: r["timing"].get("mfuu"))]\n', "r['timing']['mfuu']"),
    ('def f(found):\n    for r in found:\n        yield r["launch"], r.get("rows"), r["rowz"]\n', "r['rowz']"),
    ('def f(run):\n    for i, r in enumerate(run["ranks"]):\n        yield r["devise"]\n', "r['devise']"),
    ('def f(run, steps):\n    return [r["hots"] for r, s in zip(run["ranks"], steps)]\n', "r['hots']"),
    ('def f(run):\n    if (t := run.get("timing")):\n        return t["steps_"]\n', "t['steps_']"),
])
def test_a_misspelt_field_is_found_wherever_the_reader_reads_it(source, said):
    """The walk follows a section's key, a name bound to a section or to a rank, a comprehension, a guard
    (`or {}`) and a list's item; each planted misspelling is named, and only it."""
    found = [s for reads in reads_of(source, "planted") for _, s in reads.undeclared]
    assert found == [said]


def test_a_misspelt_field_is_found_in_a_function_a_part_of_a_result_is_passed_to():
    """A rank handed to a helper of its module, a section to another module's function (imported either way), a
    part handed on twice: each parameter reads as what its callers pass."""
    caller = ('from scalelab import helper\nfrom scalelab.helper import comm\n'
              'def claim(run):\n    for r in run["ranks"]:\n        _one(r)\n'
              '    helper.launch_of(run["launch"])\n    comm(t=run["timing"])\n'
              'def _one(rank):\n    return rank["device_nam"]\n')
    helper = ('def launch_of(launch):\n    return _link(launch.get("link"))\n'
              'def _link(link):\n    return link["gbits"]\n'
              'def comm(*, t):\n    t = _check(t)\n    return t\n'
              'def _check(t):\n    return t["comm"]["waited"]\n')
    found = sorted(s for reads in Program({"scalelab.caller": caller, "scalelab.helper": helper}).reads()
                   for _, s in reads.undeclared)
    assert found == ["link['gbits']", "rank['device_nam']", "t['comm']['waited']"]


def test_a_rank_record_as_a_run_builds_it_is_followed_into_what_reads_it():
    """Where a run makes the records rather than reads them (RETURNS): a rank's own record, the gathered ones, and
    a list of one, handed on."""
    run = ('from scalelab.train.payload import gather\nfrom scalelab import timing\n'
           'def end(ctx):\n    per_rank = gather(ctx.rank_record())\n    timing.summary(per_rank)\n'
           '    own = [ctx.rank_record()]\n    return own[0]["step_time_s"]\n')
    payload = 'def gather(record):\n    return [record]\n'
    timing = 'def summary(per_rank):\n    return [r["lossses"] for r in per_rank]\n'
    found = sorted(s for reads in Program({"scalelab.run": run, "scalelab.train.payload": payload,
                                           "scalelab.timing": timing}).reads() for _, s in reads.undeclared)
    assert found == ["own[0]['step_time_s']", "r['lossses']"]


def test_a_result_is_followed_from_its_loader_through_what_picks_it_to_the_claim_that_reads_it():
    """results.scan's list, a helper that returns its newest item (or None), `a or b`, then a claim that reads one
    section only: its first key is checked too."""
    source = ('from scalelab import results\n'
              'def newest(found):\n    done = [r for r in found if r.get("status") == "completed"]\n'
              '    return max(done, key=len) if done else None\n'
              'def check(folder):\n    found, _ = results.scan(folder)\n    run = newest(found) or newest(found)\n'
              '    return claim(run)\n'
              'def claim(run):\n    return run["workloads"]\n'
              'def other(path):\n    return loaded(results.load(path))\n'
              'def loaded(result):\n    return result["launchh"]\n'
              'def nodes(folder):\n    return [r["launch"]["num_nodess"] for r in results.scan(folder)[0]]\n')
    found = [s for reads in Program({"scalelab.check": source, "scalelab.results": "def scan(f):\n    return 1\n"
                                     "def load(f):\n    return 1\n"}).reads() for _, s in reads.undeclared]
    assert sorted(found) == ["r['launch']['num_nodess']", "result['launchh']", "run['workloads']"]


def test_fields_that_are_declared_or_open_pass():
    """Declared fields, a mapping's keys (metrics, fingerprint.wire) and what is not a result pass."""
    source = ('def f(run, cfg):\n    t = run["timing"]\n    m = run["metrics"]["train_loss"]\n'
              '    w = run["fingerprint"]["wire"]["all_reduce"]["bytes"]\n'
              '    return t["comm"]["waited_s"], run["launch"]["link"]["gbit"], cfg["model"]["depth"], m, w\n')
    (reads,) = [r for r in reads_of(source, "ok") if r.where == "ok:f"]
    assert reads.undeclared == [] and reads.checked == 5
