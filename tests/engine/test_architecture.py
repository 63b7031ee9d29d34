"""docs/architecture.md is true: it names every module by its full path, and the layering it
draws is the one the imports follow.

A newcomer reads that page first; a module it does not name is a module nobody explained,
and an arrow it draws that the code does not follow sends them the wrong way. Names are
checked as full paths under the section's folder (``cache/requests.py`` is
``engine/cache/requests.py``; naming ``requests.py`` covers ``engine/requests.py`` only),
and imports are read from the source with an AST scan (``test_import_cycles.import_graph``:
relative imports resolved to ``evaldag.*`` module names), not by eye.
"""

import ast
import functools
import re
import tomllib
from pathlib import Path

import pytest

from .test_import_cycles import import_graph as _scan

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
TOPS = ("engine", "metrics", "benchmarks")
import_graph = functools.cache(_scan)  # one AST scan for the whole file
_NAME = re.compile(r"`([\w/]+\.py|[\w/]+/)`")


def _sections() -> dict[str | None, set[str]]:
    """Backticked module / folder names, by the folder their section's heading names.

    Under ``### engine/`` a name is a path inside ``engine/`` (likewise ``metrics/`` and
    ``benchmarks/``); elsewhere (the picture, the walk through a run) a name may be a path
    inside any of the three or inside the repository.
    """
    out: dict[str | None, set[str]] = {None: set()}
    top = None
    for line in PAGE.splitlines():
        if m := re.match(r"#{2,3} (\S+)", line):
            word = m.group(1).rstrip("/")
            top = word if line.startswith("### ") and word in TOPS else None
            out.setdefault(top, set())
        out[top].update(_NAME.findall(line))
    return out


NAMED = _sections()


def _under(top: str) -> set[str]:
    return NAMED.get(top, set())


def test_every_engine_module_is_named_by_its_full_path():
    named = _under("engine")
    missing = []
    for f in sorted((ROOT / "engine").rglob("*.py")):
        rel = f.relative_to(ROOT / "engine")
        if f.name == "__init__.py" and len(rel.parts) > 1:
            continue  # a package is named by its folder
        if rel.as_posix() not in named:
            missing.append(rel.as_posix())
        if len(rel.parts) > 1 and f"{rel.parts[0]}/" not in named:
            missing.append(f"{rel.parts[0]}/")
    assert not missing, f"docs/architecture.md (### engine/) does not name: {sorted(set(missing))}"


def test_every_metric_and_benchmark_package_is_named_in_its_section():
    missing = [f"{top}/{d.name}/" for top in ("metrics", "benchmarks") for d in sorted((ROOT / top).iterdir())
               if d.is_dir() and (d / "__init__.py").exists() and f"{d.name}/" not in _under(top)]
    assert not missing, f"docs/architecture.md does not name: {missing}"


def _exists(name: str, bases: list[Path]) -> bool:
    return any((b / name).is_dir() if name.endswith("/") else (b / name).is_file() for b in bases)


def test_the_page_names_only_paths_that_exist():
    """Every name is a real path: a per-folder claim ("each benchmark has a config.py") cannot hide here."""
    gone = []
    for top, names in NAMED.items():
        bases = [ROOT / top] if top else [ROOT, *(ROOT / t for t in TOPS)]
        gone += [f"{top or '(anywhere)'}: {n}" for n in sorted(names) if not _exists(n, bases)]
    assert not gone, f"docs/architecture.md names paths that do not exist: {gone}"


def test_the_page_names_are_read_by_section():
    """The check above can fail: it reads the page's three tables under their own folders."""
    assert "cache/requests.py" in _under("engine") and "requests.py" in _under("engine")
    assert "unlearning/scoring.py" in _under("metrics")
    assert "tofu/benchmark.py" in _under("benchmarks")
    assert _exists("cache/requests.py", [ROOT / "engine"]) and not _exists("config.py", [ROOT / "benchmarks"])


def test_tests_mirror_the_tree():
    """Tests live beside what they test: tests/engine, tests/metrics, tests/benchmarks, tests/fidelity."""
    tests = ROOT / "tests"
    loose = sorted(f.name for f in tests.glob("test_*.py"))
    assert not loose, f"move these into tests/engine|metrics|benchmarks|fidelity: {loose}"
    assert {d.name for d in tests.iterdir() if d.is_dir() and any(d.glob("test_*.py"))} <= {"engine", "metrics", "benchmarks", "fidelity"}


def test_modules_stay_small():
    """One job per module: none grows past 400 lines (split by concern instead)."""
    big = sorted(f"{f.relative_to(ROOT)} ({n})" for top in TOPS for f in (ROOT / top).rglob("*.py")
                 if (n := len(f.read_text().splitlines())) > 400)
    assert not big, big


# -- the layering the page draws ------------------------------------------------------------
def _edges(src: str, dst: str) -> list[str]:
    """Imports from modules under ``src`` to modules under ``dst`` (``evaldag.engine.render`` ...)."""
    inside = lambda m, p: m == p or m.startswith(p + ".")  # noqa: E731
    return sorted(f"{a} -> {b}" for a, b in import_graph().edges if inside(a, src) and inside(b, dst))


def test_the_core_knows_nothing_of_running_and_running_nothing_of_drawing():
    """The page: `declare`/`graph`/`fingerprint` know nothing of running; `run`/`executor`/`cache` nothing of drawing."""
    e = "evaldag.engine"
    bad = [x for core in ("declare", "graph", "fingerprint")
           for up in ("run", "executor", "cache", "adapters", "distributed", "outputs", "render", "cli", "benchmark")
           for x in _edges(f"{e}.{core}", f"{e}.{up}")]
    bad += [x for low in ("run", "executor", "cache") for up in ("render", "cli", "benchmark", "outputs")
            for x in _edges(f"{e}.{low}", f"{e}.{up}")]
    assert not bad, bad


def test_the_arrows_the_page_corrected():
    """`distributed/sharded.py` imports the executor (not the reverse); `outputs/` does not import `run.py`."""
    e = "evaldag.engine"
    assert _edges(f"{e}.distributed.sharded", f"{e}.executor")
    assert not _edges(f"{e}.executor", f"{e}.distributed")
    assert not _edges(f"{e}.outputs", f"{e}.run")


def test_render_is_a_leaf():
    """`render/` draws a plain view model: it imports nothing of evaldag outside itself."""
    r = "evaldag.engine.render"
    out = [x for x in _edges(r, "evaldag") if not x.split(" -> ")[1].startswith(r)]
    assert not out, "render/ imports outside itself:\n" + "\n".join(out)


def _benchmark_leaves() -> set[str]:
    """The plugins: the first name under ``benchmarks/`` of each benchmark and command entry point."""
    eps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    values = [*eps["evaldag.benchmarks"].values(), *eps.get("evaldag.commands", {}).values()]
    return {v.split(":")[0].split(".")[2] for v in values if v.startswith("evaldag.benchmarks.")}


def test_the_benchmark_leaves_are_read_from_the_entry_points():
    assert {"tofu", "muse", "weat", "editing", "probes", "toy", "demo"} <= _benchmark_leaves()


def test_benchmarks_import_the_shared_layer_never_each_other():
    """Inside benchmarks/: shared layer <- leaves. A leaf (a benchmark or command package) imports
    itself and the shared modules beside it; the shared layer imports no leaf; no leaf imports another."""
    leaves = _benchmark_leaves()

    def leaf(mod: str) -> str | None:
        parts = mod.split(".")
        return parts[2] if len(parts) > 2 and parts[2] in leaves else None

    bad = []
    for a, b in import_graph().edges:
        if a.startswith("evaldag.benchmarks") and b.startswith("evaldag.benchmarks"):
            la, lb = leaf(a), leaf(b)
            if lb is not None and la != lb:
                bad.append(f"{a} -> {b}" + ("  (shared -> leaf)" if la is None else "  (leaf -> leaf)"))
    assert not bad, "benchmarks/ imports against the layering:\n" + "\n".join(sorted(bad))


# -- one library driver under the front ends --------------------------------------------------
def test_never_the_front_ends_into_each_other_nor_the_engine_into_the_cli():
    """`cli/` and `integrations/` are front ends of the library driver (`session.py`): the Trainer
    callback imports nothing of `cli/`, and no engine module outside `cli/` (nor a plugin) does."""
    e = "evaldag.engine"
    assert not _edges(f"{e}.integrations", f"{e}.cli"), _edges(f"{e}.integrations", f"{e}.cli")
    bad = [x for x in _edges("evaldag", f"{e}.cli") if not x.startswith(f"{e}.cli")]
    assert not bad, "imports of cli/ from outside it:\n" + "\n".join(bad)


PARSE_STEP = {"engine/options.py"}  # the one place a run's Namespace is read into typed values


def _namespace_functions(trees: dict[str, "ast.Module"]) -> set[str]:
    """Names of functions (and methods) annotated to return an ``argparse.Namespace``."""
    return {fn.name for tree in trees.values() for fn in ast.walk(tree)
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.returns is not None
            and "Namespace" in ast.unparse(fn.returns)}


def namespace_writes(tree: "ast.Module", returning: set[str]) -> list[str]:
    """``X.attr = ...`` / ``X.attr += ...`` / ``setattr(X, ...)`` where X is a Namespace inside a
    function: a parameter annotated so, or a name bound to ``parse_args(...)``,
    ``argparse.Namespace(...)`` or a call of a function in ``returning``. An ``argparse.Action``'s
    ``__call__`` is the parse itself (argparse hands it the Namespace it fills), not a write after it."""
    out = []
    parsing = {id(fn) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
               and any(ast.unparse(b).endswith("Action") for b in cls.bases)
               for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__call__"}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or id(fn) in parsing:
            continue
        params = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        names = {a.arg for a in params if a.annotation is not None and "Namespace" in ast.unparse(a.annotation)}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                func = node.value.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("parse_args", "Namespace") or called in returning:
                    names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            out += [f"{fn.name}: {ast.unparse(t)}" for t in targets
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names]
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setattr" and node.args \
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in names:
                out.append(f"{fn.name}: setattr({node.args[0].id}, ...)")
    return out


def test_no_namespace_attribute_is_written_after_parsing():
    """argparse's Namespace is read once (`options.py`) and never written: what a run adds
    (its command line, a sweep's provenance, the callback's in-memory model) is typed
    (`session.RunOptions`), so no module learns a run's settings from a Namespace attribute."""
    trees = {f.relative_to(ROOT).as_posix(): ast.parse(f.read_text()) for top in TOPS for f in (ROOT / top).rglob("*.py")}
    returning = _namespace_functions(trees)
    bad = [f"{path}: {w}" for path, tree in sorted(trees.items()) if path not in PARSE_STEP
           for w in namespace_writes(tree, returning)]
    assert not bad, "a Namespace written after parsing:\n" + "\n".join(bad)


def test_the_namespace_check_can_fail():
    """What the previous check looks for, found in code that does it."""
    src = '''
import argparse
def cmd(args: argparse.Namespace, argv):
    args.command_line = argv
def for_folder(self, folder) -> argparse.Namespace: ...
def run(self, folder):
    args = self.for_folder(folder)
    args.in_memory = {"model": 1}
    setattr(args, "x", 1)
def fine(trainer_args):
    trainer_args.output_dir = "x"
'''
    tree = ast.parse(src)
    assert namespace_writes(tree, _namespace_functions({"x": tree})) == \
        ["cmd: args.command_line", "run: args.in_memory", "run: setattr(args, ...)"]


def test_only_the_parse_step_reads_a_benchmarks_config_from_a_namespace():
    """`config_from_args` and `metrics_from_args` are called by `options.py` alone (and by a
    benchmark's own `config_from_args`, on itself)."""
    calls = [f"{f.relative_to(ROOT)}: {ast.unparse(n.func)}" for top in TOPS for f in sorted((ROOT / top).rglob("*.py"))
             if f.relative_to(ROOT).as_posix() not in PARSE_STEP
             for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Attribute) and n.func.attr in ("config_from_args", "metrics_from_args")
             and ast.unparse(n.func.value) not in ("self", "super()")]  # a benchmark's own, inside config_from_args
    assert not calls, calls


def test_the_distributed_executor_calls_only_the_declared_adapter_members():
    """``distributed/`` serves any backend: what it asks of a loaded adapter is declared on
    ``backend.ModelAdapter`` (``lockstep()`` for weights split over the ranks), never an HF
    adapter's own attributes (its ``model``, its ``pad_id``)."""
    from evaldag.engine.backend import ModelAdapter

    used = set()
    for f in sorted((ROOT / "engine" / "distributed").glob("*.py")):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "adapter":
                used.add(n.attr)
    assert used and not used - set(dir(ModelAdapter)), sorted(used - set(dir(ModelAdapter)))


# -- importing the engine changes nothing -----------------------------------------------------
def import_time_mutations(tree: "ast.Module") -> list[str]:
    """Module-level statements that change another module's objects when this one is imported:
    ``Imported.attr = ...`` (a method attached to a class from outside) and calls of the hooks
    that did so (``install()``, ``add_view_builder(...)``)."""
    imported = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    out = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            base = t
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(t, ast.Attribute) and isinstance(base, ast.Name) and base.id in imported:
                out.append(f"line {node.lineno}: {ast.unparse(t)} = ...")
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("install", "add_view_builder"):
                out.append(f"line {node.lineno}: {ast.unparse(node.value)}")
    return out


def test_importing_the_engine_attaches_nothing_to_a_class_of_another_module():
    """The classes declare their own methods (`Graph._repr_svg_`, `RunResult.to_pandas`, ...) and reach
    higher layers through `hooks.py`'s tables; no engine module patches another's objects on import."""
    bad = [f"{f.relative_to(ROOT)}: {m}" for f in sorted((ROOT / "engine").rglob("*.py"))
           for m in import_time_mutations(ast.parse(f.read_text()))]
    assert not bad, "import-time mutations:\n" + "\n".join(bad)


def test_the_import_time_check_can_fail():
    src = '''
from .graph import Graph
from . import notebook, views
import evaldag.engine.results as results
Graph._repr_svg_ = lambda self: ""
results.RunResult.to_pandas = None
notebook.install()
views.add_view_builder(print)
LOCAL = {}
LOCAL_ATTR = Graph.order
'''
    assert import_time_mutations(ast.parse(src)) == [
        "line 5: Graph._repr_svg_ = ...", "line 6: results.RunResult.to_pandas = ...", "line 7: notebook.install()",
        "line 8: views.add_view_builder(print)"]


# -- the picture's arrows are imports ---------------------------------------------------------
_BOX_NAME = re.compile(r"[\w/]+\.py|\w+/")
_UP = "│├┤┬"  # a vertical line (or a branch on it) continues upwards


def picture_arrows(page: str) -> list[tuple[str, str]]:
    """(source, target) for each arrow of the page's picture of the engine.

    ``a ──► b`` on one line is a -> b; ``b, c`` after an arrow are two targets; an arrow that
    starts at a branch (``├──►``, ``└──►``, a ``┬`` on a horizontal line) comes from the name
    its line leads up to, read column by column as the eye follows it.
    """
    block = page.split("```", 2)[1].splitlines()

    def names(line: str) -> list[re.Match]:
        return list(_BOX_NAME.finditer(line))

    def name_at(i: int, col: int) -> str | None:
        return next((m.group() for m in names(block[i]) if m.start() <= col < m.end()), None)

    def source(i: int, col: int) -> str | None:
        """The name the shaft ending left of ``col`` on line ``i`` comes from."""
        line = block[i]
        while col > 0 and line[col - 1] in "─┬┴":
            col -= 1
        if col > 0 and line[col - 1] == " ":  # `a ──► b`: the name before the spaces
            end = len(line[:col].rstrip(" "))
            m = [m for m in names(line[:end]) if m.end() == end]
            return m[0].group() if m else None
        if col > 0 and line[col - 1] in "└├":
            col -= 1
            for j in range(i - 1, -1, -1):
                ch = block[j][col] if col < len(block[j]) else " "
                if ch == "┬":
                    return source(j, col)
                if ch not in _UP:
                    return name_at(j, col)
        return None

    arrows = []
    for i, line in enumerate(block):
        for m in re.finditer(r"─+►", line):
            src = source(i, m.start())
            rest = line[m.end():]
            target = re.match(r"\s*(" + _BOX_NAME.pattern + r")((?:,\s*(?:" + _BOX_NAME.pattern + r"))*)", rest)
            if src and target:
                arrows += [(src, t.strip()) for t in [target.group(1), *target.group(2).split(",")[1:]]]
    return arrows


def _module(name: str) -> str:
    return "evaldag.engine." + name.rstrip("/").removesuffix(".py").replace("/", ".")


def false_arrows(page: str) -> list[str]:
    return [f"{a} ──► {b}" for a, b in picture_arrows(page) if not _edges(_module(a), _module(b))]


def test_every_arrow_of_the_picture_is_an_import():
    """The picture is a claim about the imports: each arrow it draws is an import the code makes."""
    arrows = picture_arrows(PAGE)
    assert ("session.py", "report.py") in arrows and ("run.py", "executor.py") in arrows and len(arrows) >= 14
    assert not false_arrows(PAGE), "docs/architecture.md draws arrows the imports do not follow:\n" + \
        "\n".join(false_arrows(PAGE))


def test_the_arrow_check_can_fail():
    """The same reader, on a page that draws an import the code does not make (the render leaf
    importing the engine) and branches that lead up to the wrong parent."""
    wrong = '''```
 engine     │ cli/  ──► options.py                                      │
            │   └──► session.py                                         │
            │         ├──► render/ ──► graph.py
            │         │        └──► cli/
            │         └──► report.py, declare.py
```'''
    assert picture_arrows(wrong) == [("cli/", "options.py"), ("cli/", "session.py"), ("session.py", "render/"),
                                     ("render/", "graph.py"), ("render/", "cli/"), ("session.py", "report.py"),
                                     ("session.py", "declare.py")]
    assert false_arrows(wrong) == ["session.py ──► render/", "render/ ──► graph.py", "render/ ──► cli/",
                                   "session.py ──► declare.py"]


# -- "imported by" / "used by": the page's lists of importers are complete --------------------
_LIST = r"((?:`[\w/.]+`(?:,[ \n]+|[ \n]+and[ \n]+)?)+)"


def importer_claims(page: str) -> list[tuple[str, list[str]]]:
    """(module, the engine modules the page says import it): "`X` is imported by `a`, `b` and `c`"
    in the prose and "used by `a` and `b`" in X's row of the module table."""
    out = [(m.group(1), re.findall(r"`([\w/.]+)`", m.group(2)))
           for m in re.finditer(r"`([\w/.]+)` is imported by " + _LIST, page)]
    out += [(m.group(1), re.findall(r"`([\w/.]+)`", m.group(2)))
            for m in re.finditer(r"^\| `([\w/.]+)` \|[^\n]*?used by " + _LIST, page, re.M)]
    return out


def wrong_importer_lists(page: str) -> list[str]:
    e = "evaldag.engine"
    bad = []
    for name, claimed in importer_claims(page):
        target = _module(name)
        inside = lambda m: m == target or m.startswith(target + ".")  # noqa: E731
        actual = {a for a, b in import_graph().edges if inside(b) and not inside(a) and a.startswith(e + ".")}
        actual_paths = sorted(a.removeprefix(e + ".").replace(".", "/") + ".py" for a in actual)
        if sorted(claimed) != actual_paths:
            bad.append(f"{name}: the page says {sorted(claimed)}, the imports say {actual_paths}")
    return bad


def test_the_pages_lists_of_importers_are_the_imports():
    """A list of who imports a module is complete: a newcomer reads it as "only these"."""
    assert {n for n, _ in importer_claims(PAGE)} >= {"render/", "options.py"}
    assert not wrong_importer_lists(PAGE), "\n".join(wrong_importer_lists(PAGE))


def test_the_importer_check_can_fail():
    wrong = ("`render/` is imported by `views.py` and `report.py`, and by the plugins.\n"
             "| `options.py` | the parse step; used by `cli/run.py` and `export.py` |\n")
    assert importer_claims(wrong) == [("render/", ["views.py", "report.py"]), ("options.py", ["cli/run.py", "export.py"])]
    bad = wrong_importer_lists(wrong)
    assert len(bad) == 2 and bad[0].startswith("render/: the page says ['report.py', 'views.py'], the imports say [")
    assert "'cli/graph.py'" in bad[0] and "'export.py'" in bad[1]
