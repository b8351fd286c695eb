"""The house rules of the code base (issue 14), checked on the source text alone.

Nothing here imports the project: every check parses the files with `ast`, so
the whole module runs in well under a second and a failure names the files and
functions that break a rule.

- no import circle among the modules of `mmd/` and `clients/mm/`;
- no function-level import of an mmd module (a lazy import hides a circle);
- small functions: median at most 10 lines, none over 60;
- every folder has a README.md that names each of its files and subfolders;
- every process the daemon starts is spawned by the supervisor;
- no await inside a store batch (``store.batch()``, ``session.together()``): the daemon's one
  connection would take another task's writes into the transaction;
- the client imports only `mmd.__version__`, `mmd.rpc`, `mmd.paths`, the
  standard library, click and itself;
- what reads a project's files (skills, agent file) is not called from an async function of the server or
  the API: it runs in a worker thread.
"""

from __future__ import annotations

import ast
import functools
import re
import statistics
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Where each top-level package's source lives: `mm` is the client, under clients/.
PACKAGE_DIRS = {"mmd": ROOT / "mmd", "mm": ROOT / "clients" / "mm"}

MAX_FUNCTION_LINES = 60
MAX_MEDIAN_FUNCTION_LINES = 10

# Function-level imports of mmd modules that the lead has judged legitimate (not a
# way round an import circle): {(file relative to the root, function name, module): reason}.
LAZY_IMPORT_ALLOWLIST: dict[tuple[str, str, str], str] = {
    ("mmd/turn/providers.py", "Providers._start_scripted", "mmd.models"): (
        "start-up time: the scripted model (h11 and an HTTP server) is for tests and benchmarks, "
        "so the daemon imports it with the first turn that uses one (issue 17)"
    ),
    ("mmd/turn/providers.py", "_serve_scripted", "mmd.models"): "as Providers._start_scripted",
}

# What the client may import from the daemon's package: the version, the protocol, the paths.
CLIENT_MMD_MODULES = ("mmd.rpc", "mmd.paths")
CLIENT_MMD_NAMES = {"__version__"}
CLIENT_THIRD_PARTY = {"click", "prompt_toolkit"}  # prompt_toolkit: the chat only (clients/mm/editor.py)


# --- the source tree ------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    name: str  # dotted: mmd.turn.session, mm.cli; a package is named by its own name
    path: Path
    is_package: bool  # an __init__.py

    @property
    def package(self) -> str:
        """The package relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]

    @property
    def rel(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def _python_files(folder: Path) -> Iterator[Path]:
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" not in path.parts:
            yield path


@functools.cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for top, folder in PACKAGE_DIRS.items():
        for path in _python_files(folder):
            parts = [top, *path.relative_to(folder).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            found[".".join(parts)] = Module(".".join(parts), path, is_package)
    return found


@functools.cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module name a `from … import` starts from."""
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported_modules(module: Module, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules one import statement names, as the import system would load them.

    `import a.b.c` names `a.b.c`; `from a.b import c` names `a.b.c` when that is a
    module and `a.b` (its `__init__`) otherwise. The parent packages an import also
    loads (`a`, `a.b` for `import a.b.c`) are left out: every module of a package
    loads them whatever it imports, so they are no arrow of this import — counting
    them would put each package whose `__init__` re-exports its modules in a circle
    with those modules.
    """
    known = modules()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in known]
    base = _absolute(module, node)
    named = []
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            named.append(f"{base}.{alias.name}")
        elif base in known:
            named.append(base)
    return sorted(set(named))


def _imports(root: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(root):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


Function = ast.FunctionDef | ast.AsyncFunctionDef


def functions(root: ast.AST) -> Iterator[tuple[str, Function]]:
    """Every function and method, nested ones included, with its qualified name."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Function]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, Function):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(root, "")


def length(function: Function) -> int:
    """Lines from `def` to the last line of the body: decorators are not counted."""
    assert function.end_lineno is not None
    return function.end_lineno - function.lineno + 1


# --- no import circle -------------------------------------------------------------------------


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, every import statement counted
    (those under `if TYPE_CHECKING:` and inside functions too)."""
    graph: dict[str, set[str]] = {}
    for name, module in modules().items():
        arrows = graph.setdefault(name, set())
        for node in _imports(tree(module.path)):
            arrows.update(target for target in imported_modules(module, node) if target != name)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return components


def test_strongly_connected_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    circles = sorted(c for c in strongly_connected(graph) if len(c) > 1)
    assert circles == [["a", "b", "c"], ["d", "e"]]


def test_relative_imports_resolve() -> None:
    def start(module: Module, source: str) -> str:
        node = ast.parse(source).body[0]
        assert isinstance(node, ast.ImportFrom)
        return _absolute(module, node)

    bash = Module("mmd.tools.builtin.bash", ROOT / "mmd/tools/builtin/bash.py", is_package=False)
    tools = Module("mmd.tools", ROOT / "mmd/tools/__init__.py", is_package=True)
    assert start(bash, "from ...procs import run_tool_process") == "mmd.procs"
    assert start(bash, "from .echo import EchoLimiter") == "mmd.tools.builtin.echo"
    assert start(bash, "from . import echo") == "mmd.tools.builtin"
    assert start(tools, "from .base import ToolError") == "mmd.tools.base"
    assert start(tools, "from .. import paths") == "mmd"


def test_no_import_circle() -> None:
    graph = import_graph()
    known = modules()
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    report = []
    for circle in sorted(circles, key=len):
        members = set(circle)
        report.append(f"a circle of {len(circle)} modules:")
        for name in circle:
            inside = sorted(graph[name] & members)
            report.append(f"  {known[name].rel} imports {', '.join(inside)}")
    assert not circles, "\n".join(report)


# --- no function-level import of an mmd module ----------------------------------------------


def _mmd_modules_named(module: Module, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        names = [_absolute(module, node)]
    return [name for name in names if name == "mmd" or name.startswith("mmd.")]


def _own_imports(function: Function) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports in a function's body, not those of the functions nested in it."""
    pending = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif not isinstance(node, Function):
            pending.extend(ast.iter_child_nodes(node))


def lazy_mmd_imports() -> list[tuple[str, str, int, str]]:
    """(file, function, line, module) of each import of an mmd module inside a function."""
    found = []
    for module in modules().values():
        for qualname, function in functions(tree(module.path)):
            for node in _own_imports(function):
                for name in _mmd_modules_named(module, node):
                    found.append((module.rel, qualname, node.lineno, name))
    return sorted(set(found))


def test_no_function_level_import_of_an_mmd_module() -> None:
    offenders = [
        f"  {rel}:{line} {function}() imports {name}"
        for rel, function, line, name in lazy_mmd_imports()
        if (rel, function, name) not in LAZY_IMPORT_ALLOWLIST
    ]
    assert not offenders, (
        "imports of mmd modules inside functions (move them to the top of the file; if that makes a "
        "circle, the modules are in the wrong layer; a legitimate one goes in LAZY_IMPORT_ALLOWLIST "
        "with its reason):\n" + "\n".join(offenders)
    )


def test_lazy_import_allowlist_is_current() -> None:
    found = {(rel, function, name) for rel, function, _, name in lazy_mmd_imports()}
    stale = sorted(set(LAZY_IMPORT_ALLOWLIST) - found)
    assert not stale, f"LAZY_IMPORT_ALLOWLIST entries that no longer match an import: {stale}"


# --- function sizes ---------------------------------------------------------------------------


def function_lengths() -> list[tuple[int, str]]:
    return [
        (length(function), f"{module.rel}:{function.lineno} {qualname}")
        for module in modules().values()
        for qualname, function in functions(tree(module.path))
    ]


def test_no_function_over_60_lines() -> None:
    long = sorted(((n, where) for n, where in function_lengths() if n > MAX_FUNCTION_LINES), reverse=True)
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (decorators not counted):\n" + "\n".join(
        f"  {n:4} {where}" for n, where in long
    )


def test_median_function_length() -> None:
    lengths = function_lengths()
    median = statistics.median(n for n, _ in lengths)
    over = sum(n > MAX_MEDIAN_FUNCTION_LINES for n, _ in lengths)
    assert median <= MAX_MEDIAN_FUNCTION_LINES, (
        f"the median function is {median} lines over {len(lengths)} functions "
        f"(at most {MAX_MEDIAN_FUNCTION_LINES}); {over} are over {MAX_MEDIAN_FUNCTION_LINES}; the longest:\n"
        + "\n".join(f"  {n:4} {where}" for n, where in sorted(lengths, reverse=True)[:20])
    )


# --- every folder has a README that names its contents --------------------------------------


def readme_folders() -> list[Path]:
    """mmd/ and each package under it, the clients, tests/, docs/, bench/, contrib/."""
    packages = sorted(
        init.parent for init in (ROOT / "mmd").rglob("__init__.py") if init.parent.name != "__pycache__"
    )
    others = ["clients/mm", "clients/nvim", "tests", "docs", "bench", "contrib"]
    return [*packages, *(ROOT / other for other in others)]


def _ignored(path: Path) -> bool:
    return path.name.startswith(".") or path.name in {"__pycache__", "__init__.py", "README.md", "py.typed"}


def expected_names(folder: Path) -> list[str]:
    """What the README of a folder must name: in a Python folder each module by file name;
    elsewhere each file; and each subfolder as `name/`."""
    python = (folder / "__init__.py").exists()
    names = []
    for entry in sorted(folder.iterdir()):
        if _ignored(entry):
            continue
        if entry.is_dir():
            names.append(f"{entry.name}/")
        elif not python or entry.suffix == ".py":
            names.append(entry.name)
    return names


def names(text: str, name: str) -> bool:
    """Whether `text` names `name` as a whole: `db.py` is not named by `mydb.py`, but is by `store/db.py`."""
    end = "" if name.endswith("/") else r"(?![\w-])"
    return re.search(rf"(?<![\w.-]){re.escape(name)}{end}", text) is not None


def test_every_folder_has_a_readme() -> None:
    missing = [
        folder.relative_to(ROOT).as_posix() + "/"
        for folder in readme_folders()
        if not (folder / "README.md").is_file()
    ]
    assert not missing, "folders without a README.md:\n" + "\n".join(f"  {m}" for m in missing)


def test_each_readme_names_its_folder() -> None:
    gaps = []
    for folder in readme_folders():
        readme = folder / "README.md"
        if not readme.is_file():
            continue  # test_every_folder_has_a_readme reports it
        text = readme.read_text(encoding="utf-8")
        absent = [name for name in expected_names(folder) if name not in text]
        if absent:
            gaps.append(f"  {readme.relative_to(ROOT)} does not name: {', '.join(absent)}")
    assert not gaps, "READMEs that miss files or subfolders of their folder:\n" + "\n".join(gaps)


# --- the client's imports ---------------------------------------------------------------------


def _client_may_import(name: str, names: list[str] | None) -> bool:
    """`name` is an absolute module; `names` the names a `from name import …` takes."""
    top = name.split(".")[0]
    if top == "mm" or top in CLIENT_THIRD_PARTY or top in sys.stdlib_module_names:
        return True
    if any(name == allowed or name.startswith(f"{allowed}.") for allowed in CLIENT_MMD_MODULES):
        return True
    if name == "mmd":
        # `import mmd` for mmd.__version__, or `from mmd import __version__, rpc, paths`.
        return names is None or all(n in CLIENT_MMD_NAMES or f"mmd.{n}" in CLIENT_MMD_MODULES for n in names)
    return False


def client_import_violations() -> list[str]:
    found = []
    for module in modules().values():
        if module.name.split(".")[0] != "mm":
            continue
        for node in _imports(tree(module.path)):
            if isinstance(node, ast.Import):
                pairs = [(alias.name, None) for alias in node.names]
            else:
                pairs = [(_absolute(module, node), [alias.name for alias in node.names])]
            for name, names in pairs:
                if not _client_may_import(name, names):
                    what = f"from {name} import {', '.join(names)}" if names else f"import {name}"
                    found.append(f"  {module.rel}:{node.lineno} {what}")
    return found


def test_the_daemon_is_started_before_the_protocol_is_imported() -> None:
    """A cold `mm -p` spawns mmd from mm/spawn.py first: it (and mmd.rpc.trust, through a package that
    imports its submodules on first use) must not pull in msgspec, click or trio."""
    code = "import sys, mm.spawn; print(sorted(m for m in ('msgspec', 'click', 'trio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_client_imports_only_the_protocol() -> None:
    violations = client_import_violations()
    assert not violations, (
        "the client may import only mmd.__version__, mmd.rpc, mmd.paths, the standard library, click "
        "and mm:\n" + "\n".join(violations)
    )


# --- every child of the daemon is the supervisor's ---------------------------------------------

# Modules of mmd that start processes themselves, and why that is not the daemon: the daemon is a
# subreaper and reaps the orphans it inherits by pid, taking any zombie child the supervisor did not
# spawn for one (mmd/procs/supervisor.py) — a child started elsewhere in the daemon could lose its status.
OWN_SPAWNERS = {
    "mmd/procs/supervisor.py": "the supervisor itself",
    "mmd/procs/cspawn.py": "the C library's posix_spawn, called by the supervisor only",
    "mmd/local/install.py": "`mm local setup`: a process of its own (python -m mmd.local.install)",
    "mmd/local/selftest.py": "run by mmd/local/install.py, in that process",
    "mmd/local/children.py": "the children of mmd/local/install.py and selftest.py, in that process",
}
SPAWN_CALLS = re.compile(
    r"\b(subprocess\.(run|Popen|call|check_call|check_output)|trio\.run_process|open_process|os\.fork|"
    r"posix_spawnp?|cspawn\.spawnp|os\.spawn\w*|os\.system|asyncio\.create_subprocess_\w+)\s*\("
)


def test_every_child_of_the_daemon_is_spawned_by_the_supervisor() -> None:
    offenders = [
        f"  {module.rel}:{n}: {line.strip()}"
        for name, module in modules().items()
        if name.startswith("mmd") and module.rel not in OWN_SPAWNERS
        for n, line in enumerate(module.path.read_text(encoding="utf-8").splitlines(), 1)
        if SPAWN_CALLS.search(line)
    ]
    assert not offenders, (
        "processes started outside mmd/procs/supervisor.py (use run_tool_process or supervised_process):\n"
        + "\n".join(offenders)
    )


# --- no await inside a store transaction block -------------------------------------------------

TRANSACTION_BLOCKS = ("batch", "together")


def awaits_in_transaction_blocks(module_tree: ast.AST) -> list[int]:
    """The lines of the batch()/together() blocks of *module_tree* that await inside."""
    found = []
    for node in ast.walk(module_tree):
        if not isinstance(node, ast.With):
            continue
        opens = [
            item.context_expr
            for item in node.items
            if isinstance(item.context_expr, ast.Call)
            and isinstance(item.context_expr.func, ast.Attribute)
            and item.context_expr.func.attr in TRANSACTION_BLOCKS
        ]
        if opens and any(
            isinstance(inner, ast.Await | ast.AsyncFor | ast.AsyncWith)
            for statement in node.body
            for inner in ast.walk(statement)
        ):
            found.append(node.lineno)
    return found


def test_no_await_inside_a_store_transaction_block() -> None:
    # Store.batch holds one SQLite transaction open on the daemon's one connection: a task switch inside
    # it would let another session's writes join it, and that session's events go out before it commits.
    found = [
        f"{module.rel}:{line}"
        for module in modules().values()
        for line in awaits_in_transaction_blocks(tree(module.path))
    ]
    assert found == [], "await inside a batch()/together() block"


def test_the_transaction_block_check_sees_an_await() -> None:
    code = "async def f(s):\n    with s.together():\n        await g()\n    with s.batch():\n        h()\n"
    assert awaits_in_transaction_blocks(ast.parse(code)) == [2]


# --- what reads a project's files runs in a worker thread, never on the event loop's ---------------------

# Functions that read what a project holds (its skills, its agent file, the files the system prompt names):
# a cloned repository decides how long they take (500 SKILL.md files took 115 s), and on the loop's thread
# every session and client of the daemon would wait. The daemon calls them through trio.to_thread.run_sync.
PROJECT_READERS = ("assemble", "build_tools", "load_skills", "load", "load_agent")


def project_reads_on_the_loop(module_tree: ast.AST) -> list[int]:
    """The lines of async functions in *module_tree* that call a PROJECT_READERS function directly."""
    found = []
    for function in ast.walk(module_tree):
        if not isinstance(function, ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call):
                name = (
                    node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                )
                if name in PROJECT_READERS:
                    found.append(node.lineno)
    return found


def test_no_project_file_is_read_on_the_event_loop() -> None:
    found = [
        f"{module.rel}:{line}"
        for name, module in modules().items()
        if name.startswith("mmd.server") or name.startswith("mmd.api")
        for line in project_reads_on_the_loop(tree(module.path))
    ]
    assert found == [], "a project's files read in an async function: use trio.to_thread.run_sync"


def test_the_project_read_check_sees_a_direct_call_and_passes_a_thread() -> None:
    code = (
        "async def f(p):\n    s = plan.assemble(p)\n"
        "async def g(p):\n    s = await trio.to_thread.run_sync(plan.assemble, p)\n"
    )
    assert project_reads_on_the_loop(ast.parse(code)) == [2]
