"""Imports inside evaldag point one way: no module reaches itself again through imports.

Every ``import`` of an evaldag module counts, at module level or inside a function, so a
cycle cannot hide behind a function-level import. ``from pkg import name`` is an edge to
the submodule ``pkg.name`` when that is a module, else to ``pkg`` itself (its
``__init__``). Lazy imports of heavy third-party libraries (torch, transformers, scipy)
are not evaldag modules and do not count.
"""

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
TOPS = ("engine", "metrics", "benchmarks")


def _modules() -> dict[str, Path]:
    mods = {}
    for top in TOPS:
        for f in (ROOT / top).rglob("*.py"):
            rel = f.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(["evaldag", *parts])] = f
    return mods


def _resolve(mod: str, is_pkg: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph() -> nx.DiGraph:
    mods = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(mods)
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, is_pkg, node.level, node.module)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    targets.append(sub if sub in mods else base)
            for t in targets:
                while t and t not in mods and "." in t:  # `import evaldag.engine.x.y` -> the deepest module known
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    g.add_edge(mod, t)
    return g


def test_the_module_list_is_real():
    g = import_graph()
    assert "evaldag.engine.declare" in g and "evaldag.metrics" in g
    assert g.number_of_edges() > 50


def test_no_import_cycles():
    cycles = sorted(nx.simple_cycles(import_graph()), key=len)
    shown = ["  " + " -> ".join(c + [c[0]]) for c in cycles[:15]]
    assert not cycles, f"{len(cycles)} import cycle(s) inside evaldag, e.g.:\n" + "\n".join(shown)


def test_the_engine_imports_no_benchmark_or_metric():
    g = import_graph()
    leaks = sorted((a, b) for a, b in g.edges if a.startswith("evaldag.engine") and b.startswith(("evaldag.metrics", "evaldag.benchmarks")))
    assert not leaks, leaks


def test_the_engine_names_no_benchmark_or_metric_module():
    """Not even by string (importlib): the engine knows benchmarks and metrics only through registries."""
    found = []
    for f in (ROOT / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith(("evaldag.benchmarks.", "evaldag.metrics.")):
                    found.append(f"{f.relative_to(ROOT)}: {node.value!r}")
    assert not found, found


# Libraries a module may import inside a function (heavy, or needed only by some runs);
# each such module says so in a comment. Anything else is imported at the top.
LAZY_OK = {"torch", "transformers", "tokenizers", "safetensors", "huggingface_hub", "accelerate", "tqdm", "joblib",
           "scipy", "platformdirs", "rouge_score", "yaml", "datasets", "gensim",
           "pandas", "pyarrow",  # optional (evaldag[pandas]): imported only by to_pandas() / export --parquet
           "peft",  # optional (evaldag[peft]): imported only when an adapter loads
           "wandb",  # optional (evaldag[wandb]): imported only by export --wandb
           "vllm",  # optional (evaldag[vllm]): imported only when a vllm: engine starts or serves
           "jinja2",  # transformers' template engine: imported only when a chat template is rendered (chat_quirks.py)
           "gguf",  # optional (evaldag[gguf]): imported only when a .gguf model is checked or loaded
           "bitsandbytes",  # optional (evaldag[quantize]): imported only when --attack quantize loads its model
           "deepspeed"}  # never a dependency: imported only to gather a ZeRO-3 model a DeepSpeed job trains


def test_function_level_imports_in_the_engine_are_heavy_libraries_only():
    found = []
    for f in sorted((ROOT / "engine").rglob("*.py")):
        tree = ast.parse(f.read_text(), str(f))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                for n in names:
                    if n.split(".")[0] not in LAZY_OK:
                        found.append(f"{f.relative_to(ROOT)}:{node.lineno}: {n}")
    assert not found, "import these at the top of the module (or add a heavy library to LAZY_OK with a reason):\n" + "\n".join(found)
