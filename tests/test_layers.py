"""The packages' boundaries, read from the source: no package imports another package's private module or name,
what presents results (reports, the gate) imports none of what makes them, and no module imports itself around a
circle. `python tests/test_layers.py` prints the layers of softaudit/ as docs/design.md draws them."""

import ast
import itertools
import re
from pathlib import Path

import pytest

import softaudit

PACKAGE = Path(softaudit.__file__).parent


def _modules():
    """(dotted name of the package a file belongs to, its path) for every file of softaudit."""
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("softaudit", *path.relative_to(PACKAGE).with_suffix("").parts)
        yield parts[:-1], path


def _imported(package: tuple, tree) -> list[tuple[int, tuple]]:
    """(line, dotted name) of everything a module imports: modules, and names taken from them."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, tuple(alias.name.split("."))) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = base + tuple(node.module.split(".") if node.module else ())
            found += [(node.lineno, (*module, alias.name)) for alias in node.names]
    return found


def _owner(name: tuple) -> tuple | None:
    """The package that owns the first private part of a softaudit name (None: nothing private in it). A private
    name in a module (`softmax._rest_sum`) is owned by that module's package."""
    for i, part in enumerate(name):
        if part.startswith("_") and not part.startswith("__"):
            return name[:i] if PACKAGE.joinpath(*name[1:i]).is_dir() else name[: i - 1]
    return None


def _crossings(package: tuple, source: str) -> list[tuple[int, str]]:
    """(line, name) of each import in `source`, a module of `package`, of another package's private part."""
    found = []
    for line, name in _imported(package, ast.parse(source)):
        owner = name[0] == "softaudit" and _owner(name)
        if owner and package[: len(owner)] != owner:
            found.append((line, ".".join(name)))
    return found


def test_no_package_imports_another_packages_private_module():
    """`from ..adapters._call import call` reaches past adapters' public face: import it from softaudit.adapters.
    A package's own private modules, and its parents' (softaudit/_store.py for every package), are its own."""
    crossing = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {name}"
        for package, path in _modules()
        for line, name in _crossings(package, path.read_text(encoding="utf-8"))
    ]
    assert not crossing, "imports of another package's private module:\n" + "\n".join(crossing)


@pytest.mark.parametrize(
    "package, line, crosses",
    [
        (("softaudit", "hunt"), "from ..adapters._call import call", True),
        (("softaudit",), "from .adapters import _bridge as bridge", True),
        (("softaudit", "hunt"), "import softaudit.report._files", True),
        (("softaudit",), "from .report._findings import row_key", True),
        (("softaudit", "hunt"), "from ..adapters import call", False),
        (("softaudit", "hunt"), "from .._atomic import write_atomic", False),
        (("softaudit", "candidates"), "from .softmax import _rest_sum", False),
        (("softaudit", "hunt"), "from ._engine import hunt", False),
    ],
)
def test_the_check_flags_a_crossing_and_allows_what_is_ones_own(package, line, crosses):
    """The control: the rule flags what it should, on lines written for the purpose."""
    assert bool(_crossings(package, line)) == crosses


@pytest.mark.parametrize("presenter", ["report", "gate.py", "results.py", "settings.py"])
def test_what_presents_results_imports_nothing_that_makes_them(presenter):
    """Reports, the gate and the results contract read results; the runner, the candidates, the adapters, the
    executor and the reference are upstream of them (softaudit/results.py is the one contract)."""
    upstream = {"runner", "worst", "candidates", "adapters", "execute", "reference", "hunt", "cases", "metrics"}
    paths = sorted((PACKAGE / presenter).rglob("*.py")) if (PACKAGE / presenter).is_dir() else [PACKAGE / presenter]
    reached = []
    for path in paths:
        package = ("softaudit", *path.relative_to(PACKAGE).parts[:-1])
        for line, name in _imported(package, ast.parse(path.read_text(encoding="utf-8"))):
            if name[0] == "softaudit" and len(name) > 1 and name[1] in upstream:
                reached.append(f"{path.name}:{line}: {'.'.join(name)}")
    allowed = {"results.py": {"reference"}}  # (WorstInput's JSON: the dtype's rounding; lazily)
    reached = [r for r in reached if r.split(": ")[1].split(".")[1] not in allowed.get(presenter, set())]
    assert not reached, "\n".join(reached)


def test_adapters_public_names_all_load():
    from softaudit import adapters

    for name in adapters.__all__:
        assert getattr(adapters, name) is not None, name
    assert softaudit.Candidate is adapters.Candidate and softaudit.CandidateError is adapters.CandidateError


def test_the_hunt_is_downstream_only_the_command_line_imports_it():
    """The hunt uses plan, prepare, execute and judge; nothing of the audit imports the hunt back (the corpus it
    writes is a source of cases, read by softaudit.cases), so there is no circle: only the command line (cli/) and
    the hunt itself."""
    reached = []
    for package, path in _modules():
        if package[:2] in (("softaudit", "hunt"), ("softaudit", "cli")):
            continue
        for line, name in _imported(package, ast.parse(path.read_text(encoding="utf-8"))):
            if name[:2] == ("softaudit", "hunt"):
                reached.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {'.'.join(name)}")
    assert not reached, "imports of the hunt from upstream of it:\n" + "\n".join(reached)


def test_replaying_the_corpus_needs_neither_the_hunt_nor_hypothesis(tmp_path):
    import subprocess
    import sys

    from softaudit.cases import save_corpus

    save_corpus(tmp_path, "k", "softmax", "float32", {"x": [[1.0, 2.0]]}, None, "why", 3.0)
    code = (
        "import sys, softaudit\n"
        f"table = softaudit.audit('softaudit.candidates.softmax:max_shifted', dtypes=['float32'], suite='quick', "
        f"families=['corpus'], corpus={str(tmp_path)!r}, isolation='none').table\n"
        "assert list(table.family) == ['corpus'], table\n"
        "assert not {'softaudit.hunt', 'hypothesis'} & set(sys.modules), sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


#: A softaudit module named in a string as "softaudit.package.module:function": an import the source hides.
NAMED_PART = re.compile(r"""["']softaudit\.[a-z_.]+:[a-z_]+["']""")
#: The modules that may import by a name in a string: the lazy public faces (a package's __init__.py maps each
#: public name to the module that holds it, and _lazy.py loads it) and the loading of a user's target.
IMPORTS_BY_NAME = ("__init__.py", "_lazy.py", "adapters/_targets.py")


def _named_parts(source: str) -> list[str]:
    """The lines of `source` that name a softaudit function in a "module:function" string."""
    return [line.strip() for line in source.splitlines() if NAMED_PART.search(line)]


def test_no_module_names_its_parts_in_strings():
    """A kind's parts (its reference, what its measures need) are functions its registry imports for real, and the
    layers above keep their own tables of what they need of a kind: a "softaudit.x:function" string, or a module
    name handed to importlib, is an arrow between modules that no import shows (and no layer test sees)."""
    named, loading = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative, source = path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8")
        named += [f"{relative}: {line}" for line in _named_parts(source)]
        if "import_module" in source and not relative.endswith(IMPORTS_BY_NAME):
            loading.append(relative)
    assert not named, "modules named in strings (import them):\n" + "\n".join(named)
    assert not loading, "modules that import by a name in a string:\n" + "\n".join(loading)


def test_the_string_finder_finds_named_parts():
    """The control: the rule flags a part named in a string, and not a user's target or a family's name."""
    assert _named_parts('reference="softaudit.kinds._rows:reference",')
    assert _named_parts("strategy='softaudit.hunt._strategies:rows'")
    assert not _named_parts('target = "my_kernels.softmax:fused"')
    assert not _named_parts('name="softmax.max_shifted"')
    assert not _named_parts("from softaudit.kinds import _rows")


def test_the_kinds_import_nothing_above_them():
    """A kind holds what it is; the causes, the budgets, the hunt, the reports and the runner read kinds and keep
    their own tables of what they need of one. An import of theirs from kinds/ would be an arrow upward."""
    above = {"causes", "budget", "hunt", "report", "runner", "cli", "candidates", "judge"}
    reached = []
    for package, path in _modules():
        if package[:2] != ("softaudit", "kinds"):
            continue
        for line, name in _imported(package, ast.parse(path.read_text(encoding="utf-8"))):
            if name[0] == "softaudit" and len(name) > 1 and name[1] in above:
                reached.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {'.'.join(name)}")
    assert not reached, "imports from kinds/ of what reads the kinds:\n" + "\n".join(reached)


def test_marking_a_candidate_loads_neither_the_reference_nor_mpmath():
    """`@softaudit.candidate` checks the kind against the registry, which imports the kinds' parts: they import the
    reference where they use it, so a module that marks its kernels stays light (softaudit/adapters)."""
    import subprocess
    import sys

    code = (
        "import sys, softaudit\n"
        "softaudit.candidate(lambda x, axis=-1: x, kind='softmax', name='mine')\n"
        "assert not {'softaudit.reference', 'mpmath'} & set(sys.modules), sorted(sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_candidates_worker_process_loads_neither_the_reference_nor_mpmath():
    """An isolated worker imports softaudit.execute._worker and the candidate, and calls it: the reference (mpmath
    with it) stays out, as it was 0.1 s of the worker's 0.24 s start (issue 26: isolation's cost on a short audit),
    and so does the parent's side of softaudit.execute (pools, executors, the calls' planning, the reproducibility
    reruns), which the package loads on first use."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from softaudit.execute._worker import _call\n"
        "from softaudit.adapters import call_all, load_target\n"
        "(c,) = load_target('softaudit.candidates.softmax:max_shifted', 'softmax')\n"
        "x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(4, 16)\n"
        "(y,), note = call_all(c, {'x': x}, None, [x.shape], np.float32, None)\n"
        "assert y.shape == x.shape and note == '', note\n"
        "assert not {'softaudit.reference', 'mpmath'} & set(sys.modules), sorted(sys.modules)\n"
        "parent = {'softaudit.execute._pool', 'softaudit.execute._isolated', 'softaudit.execute._calls'}\n"
        "assert not parent & set(sys.modules), sorted(parent & set(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """softaudit's import graph: each module (a package by its dotted name, its __init__.py) -> {a softaudit module it
    imports: the line of the first such import}. Every import counts, at module level or inside a function (a lazy
    import is a dependency all the same, one Python resolves later), and so does a lazy package's TYPE_CHECKING block,
    which names the modules its names load on first use. `from package import name` is an import of the submodule
    `name` where there is one, else of the package."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = (package.name, *path.relative_to(package).with_suffix("").parts)
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in files:
            parts.pop()
        return ".".join(parts) or None

    graph = {}
    for module, path in files.items():
        here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + (node.module.split(".") if node.module else []))
                names = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names]
            else:
                continue
            for name in names:
                target = known(name)
                if target is not None and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, dict]) -> list[list[str]]:
    """One circle through each set of modules that reach each other (a strongly connected component of more than
    one module), as the modules in import order, the first again at the end; none for a graph without a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative (a deep package would exhaust the recursion)
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    break
                if nxt in stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                    if len(component) > 1:
                        found.append(_circle(graph, set(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _circle(graph: dict[str, dict], component: set[str]) -> list[str]:
    """A shortest way from the component's first module back to itself, through the component (breadth first)."""
    start = min(component)
    came = {start: None}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt == start:
                way = [node]
                while came[way[-1]] is not None:
                    way.append(came[way[-1]])
                return [*reversed(way), start]
            if nxt in component and nxt not in came:
                came[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no way back to {start} in {sorted(component)}")


def _said(graph: dict[str, dict], circle: list[str]) -> str:
    """A circle as a line per import: "softaudit.a:12 imports softaudit.b"."""
    return "\n".join(f"  {a}:{graph[a][b]} imports {b}" for a, b in itertools.pairwise(circle))


def test_no_module_imports_itself_around_a_circle():
    """Each module of softaudit depends on the others in one direction: a circle (settings -> report -> results ->
    policy -> settings, once) makes the import order matter and every module on it a change to all the others."""
    graph = import_graph()
    found = cycles(graph)
    assert not found, f"{len(found)} import circle(s):\n" + "\n\n".join(_said(graph, c) for c in found)


def test_the_circle_finder_finds_circles_and_says_each():
    """The control: circles in a graph written for the purpose, one per component, and none in a graph without."""
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3, "d": 4}, "d": {}, "e": {"f": 5}, "f": {"e": 6}}
    assert sorted(cycles(graph)) == [["a", "b", "c", "a"], ["e", "f", "e"]]
    assert _said(graph, ["e", "f", "e"]) == "  e:5 imports f\n  f:6 imports e"
    assert cycles({"a": {"b": 1}, "b": {"c": 2}, "c": {}, "d": {"a": 1, "c": 2}}) == []
    assert cycles({f"m{i}": {f"m{i + 1}": 1} for i in range(5000)} | {"m5000": {"m0": 1}})[0][0] == "m0"


def test_the_graph_reads_imports_inside_functions_and_relative_ones(tmp_path):
    """The control for the graph: a function-level import and `from . import module` are arrows too."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from .sub import b\n")
    (root / "sub" / "__init__.py").write_text("from .. import a as a\n")
    (root / "sub" / "b.py").write_text("import os\nfrom ..a import f\nfrom . import c\n")
    (root / "sub" / "c.py").write_text("from pkg.sub import thing\n")
    graph = import_graph(root)
    assert graph == {
        "pkg": {},
        "pkg.a": {"pkg.sub.b": 2},
        "pkg.sub": {"pkg.a": 1},
        "pkg.sub.b": {"pkg.a": 2, "pkg.sub.c": 3},
        "pkg.sub.c": {"pkg.sub": 1},
    }
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def layers(graph: dict[str, dict]) -> list[list[str]]:
    """softaudit's top-level modules and packages in layers, the lowest first: each imports only from layers below
    it (a layer's height is one more than the highest it imports from; a package counts as one, whatever its
    modules import among themselves)."""
    tops: dict[str, set] = {}
    for module, edges in graph.items():
        mine = _top(module)
        tops.setdefault(mine, set()).update(_top(t) for t in edges if _top(t) != mine)
    height: dict[str, int] = {}

    def measure(name: str, seen: tuple = ()) -> int:
        if name not in height:
            assert name not in seen, f"the packages import each other: {' -> '.join((*seen, name))}"
            height[name] = 1 + max((measure(t, (*seen, name)) for t in tops[name]), default=-1)
        return height[name]

    for name in tops:
        measure(name)
    return [sorted(n for n in tops if height[n] == h) for h in range(max(height.values()) + 1)]


def _top(module: str) -> str:
    """The top-level module or package of softaudit a module belongs to: softaudit.report.html -> report/."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__.py"
    return f"{parts[1]}/" if PACKAGE.joinpath(parts[1]).is_dir() else f"{parts[1]}.py"


def picture(graph: dict[str, dict], width: int = 116) -> str:
    """The layers as docs/design.md draws them, the highest first: one line per layer (wrapped), private modules
    (_name.py, shared by the packages) among the rest."""
    lines = []
    for height, names in reversed(list(enumerate(layers(graph)))):
        line = f"{height:2d}  "
        for name in names:
            if len(line) + len(name) > width and line.strip() != str(height):
                lines.append(line.rstrip())
                line = " " * 4
            line += name + "  "
        lines.append(line.rstrip())
    return "\n".join(lines)


DESIGN = PACKAGE.parent / "docs" / "design.md"


def _drawn() -> str:
    """The picture in docs/design.md: the code block after the line "## The layers, as the imports draw them"."""
    text = DESIGN.read_text(encoding="utf-8")
    return text.split("## The layers, as the imports draw them", 1)[1].split("```\n", 2)[1].rstrip("\n")


def test_the_design_docs_layers_are_the_import_graphs():
    """docs/design.md's picture of the layers is the one this file prints (`python tests/test_layers.py`), so the
    map and the code cannot disagree: a new import between packages that moves one is redrawn there."""
    assert _drawn() == picture(import_graph()), "docs/design.md's layers are not the code's; redraw them with:\n" + (
        "python tests/test_layers.py"
    )


def test_the_layers_put_each_package_above_what_it_imports():
    """The control for the picture: a made-up graph's layers."""
    graph = {"softaudit.cli.run": {"softaudit.report": 1}, "softaudit.report": {"softaudit.results": 1}}
    graph |= {"softaudit.results": {}, "softaudit.report.html": {"softaudit.report": 1}, "softaudit._hex": {}}
    assert layers(graph) == [["_hex.py", "results.py"], ["report/"], ["cli/"]]


if __name__ == "__main__":
    print(picture(import_graph()))
