"""Every notebook of notebooks/ runs where readers run it: as on Colab and Binder, not in this checkout.

A reader's kernel has the package installed by pip (not this checkout on ``sys.path``), Binder's pinned
requirements, no ``make data`` and no ``results/`` beside the notebook. So, once per session:

1. the tree as a fresh clone has it (tracked files and new ones git does not ignore: no ``.cache/``, no
   build outputs, no compiled kernel) is copied to a temporary folder;
2. a wheel of linattn_core is built from that copy (``pip wheel --no-deps --no-build-isolation``): it
   compiles the C kernel and carries the package data (the stored runs, the exit tickets);
3. a fresh virtual environment gets ``binder/requirements.txt`` and nothing else (pip's cache makes the
   second session fast), then the wheel, without ``-e``; a kernelspec for it goes under a temporary
   ``JUPYTER_PATH``.

Then every notebook runs in a kernel of its own, two at a time (longest first), from a folder outside
the repository, with a fresh ``HOME`` (so the training text is fetched on first use, into
``~/.cache/linattn/data``) and no network: every proxy points at a closed port and pip has no index; the
first-use fetch reads a local copy of the pinned sdist (``LINATTN_DATA_URL=file://...``, the copy
``make data`` keeps). These tests fail when a notebook needs a file only a checkout has, imports
something ``binder/requirements.txt`` does not install, or cannot fetch the corpus; and when a value
the notebook's prose names as printed is not printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from linattn_core.fast import kernel
from linattn_core.lm import data

pytestmark = [pytest.mark.slow, pytest.mark.book]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "linattn-readers"
WORKERS = 2  # two kernels at a time: the notebooks run one torch thread or few; CI has two cores
CELL_TIMEOUT_S = 1200  # a training cell takes minutes on a loaded 2-core machine; this only catches hangs
NOTEBOOK_TIMEOUT_S = 2400  # a kernel that never answers fails its notebook instead of the whole session
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, every connection is refused


def _placeholder() -> re.Pattern:
    """How a notebook names a printed value (``scripts/sync_notebooks.py`` writes it)."""
    spec = importlib.util.spec_from_file_location("sync_notebooks", ROOT / "scripts" / "sync_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sync_notebooks", module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.PLACEHOLDER


PLACEHOLDER = _placeholder()


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if done.returncode:
        pytest.fail(f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                    f"{(done.stdout + done.stderr)[-4000:]}")
    return done


def _clone_like_copy(target: Path) -> None:
    """The files a fresh clone of this working tree would have (what is committed or about to be)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a file deleted in the working tree but still in the index is not copied
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name, follow_symlinks=False)


def _local_copy_of_the_text() -> Path:
    """The pinned sdist as ``make data`` keeps it (fetched now, as ``make data`` would, if missing)."""
    return data.fetch(progress=False)


class Readers:
    """The fresh environment: its python, the wheel, the kernel's environment and working folder."""

    def __init__(self, base: Path):
        self.base = base
        self.python = base / "venv" / "bin" / "python"
        self.run_dir = base / "run"  # the kernels' working folder, outside the repository
        self.home = base / "home"  # the kernels' HOME: an empty ~/.cache, as on a fresh machine
        self.out = base / "executed"
        self.timings: dict[str, float] = {}

    def build(self) -> None:
        src, wheels = self.base / "src", self.base / "wheel"
        _clone_like_copy(src)
        _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
              str(wheels), str(src)])
        (self.wheel,) = wheels.glob("linattn_core-*.whl")
        _run([sys.executable, "-m", "venv", str(self.base / "venv")])
        # --no-compile: no .pyc for all of torch now (a minute on a small machine); a kernel writes those
        # it imports. --retries 1: an index that cannot be reached is skipped at once, not after backoffs.
        binder = ROOT / "binder" / "requirements.txt"
        _run([str(self.python), "-m", "pip", "install", "-q", "--no-compile", "--retries", "1", "-r",
              str(binder)])
        _run([str(self.python), "-m", "pip", "install", "-q", "--no-deps", str(self.wheel)])
        _run([str(self.python), "-m", "ipykernel", "install", "--prefix", str(self.base / "jupyter"),
              "--name", KERNEL, "--display-name", "linattn readers"])
        for folder in (self.run_dir, self.home, self.out):
            folder.mkdir()

    def env(self) -> dict[str, str]:
        """The kernels' environment: a reader's, without the network or anything of this checkout."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("LINATTN_", "JUPYTER", "PYTHON", "PIP_", "VIRTUAL_ENV", "XDG_"))
               and k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
        env.update(HOME=str(self.home), JUPYTER_PATH=str(self.base / "jupyter" / "share" / "jupyter"),
                   PATH=f"{self.python.parent}{os.pathsep}{env.get('PATH', '')}",
                   LINATTN_DATA_URL=_local_copy_of_the_text().as_uri(), PIP_NO_INDEX="1",
                   PIP_CONFIG_FILE=os.devnull)
        for name in ("http_proxy", "https_proxy", "all_proxy"):
            env[name] = env[name.upper()] = CLOSED
        return env


# The client waits for each message in slices of a few seconds. Waiting on the socket for the whole
# cell timeout at once can miss the wake-up of a reply that has already arrived (asyncio zmq polling;
# nbclient issue 312, after a widget cell): the reply is then read only when the timeout ends, a
# 20-minute stall of a notebook that ran in seconds. Each slice ends in a fresh look at the socket.
RUNNER = """
import sys
import time
from queue import Empty

import nbformat
from nbclient import NotebookClient

SLICE_S = 5.0


def sliced(get_msg):
    async def get(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return await get_msg(timeout=SLICE_S if left is None else min(SLICE_S, left))
            except Empty:
                if left is not None and left <= SLICE_S:
                    raise
    return get


def on_start(notebook):
    for channel in (client.kc.shell_channel, client.kc.iopub_channel):
        channel.get_msg = sliced(channel.get_msg)


source, out, kernel, cwd, timeout = sys.argv[1:6]
nb = nbformat.read(source, as_version=4)
client = NotebookClient(nb, kernel_name=kernel, timeout=int(timeout), startup_timeout=300,
                        resources={"metadata": {"path": cwd}}, on_notebook_start=on_start)
try:
    client.execute()
finally:
    nbformat.write(nb, out)
"""


@pytest.fixture(scope="session")
def readers(tmp_path_factory) -> Readers:
    env = Readers(tmp_path_factory.mktemp("readers"))
    t0 = time.perf_counter()
    env.build()
    env.timings["environment"] = time.perf_counter() - t0
    return env  # pytest removes old temporary folders itself (deleting a GiB of torch here takes minutes)


def _code_size(path: Path) -> int:
    return sum(len(c.source) for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")


@pytest.fixture(scope="session")
def executed(readers, request) -> dict[str, subprocess.CompletedProcess]:
    """Run the notebooks this session selected, each in its own kernel, two at a time, longest first."""
    wanted = {item.callspec.params["notebook"] for item in request.session.items
              if item.originalname == "test_notebook_runs_where_readers_run_it"}
    order = sorted((p for p in NOTEBOOKS if p.stem in wanted), key=_code_size, reverse=True)
    env = readers.env()
    runner = readers.base / "run_notebook.py"
    runner.write_text(RUNNER)

    def run(path: Path) -> tuple[str, subprocess.CompletedProcess]:
        cmd = [str(readers.python), str(runner), str(path), str(readers.out / path.name), KERNEL,
               str(readers.run_dir), str(CELL_TIMEOUT_S)]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=readers.run_dir, env=env, capture_output=True, text=True,
                                  timeout=NOTEBOOK_TIMEOUT_S)
        except subprocess.TimeoutExpired as hung:
            done = subprocess.CompletedProcess(cmd, -1, "", f"no result after {hung.timeout} s")
        readers.timings[path.stem] = time.perf_counter() - t0
        return path.stem, done

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        results = dict(pool.map(run, order))
    readers.timings["notebooks"] = time.perf_counter() - t0
    (readers.base / "timings.json").write_text(json.dumps(readers.timings, indent=1))
    return results


def _printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("notebook", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_where_readers_run_it(notebook, executed, readers):
    done = executed[notebook]
    assert done.returncode == 0, (f"notebooks/{notebook}.ipynb failed in a fresh Binder environment "
                                  f"(package from a wheel, run from outside the repository, no network):\n"
                                  f"{done.stderr[-6000:]}")
    cells = nbformat.read(readers.out / f"{notebook}.ipynb", as_version=4).cells
    for cell in cells:
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{cell.id}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    # "Run all" runs no solution: they are collapsed text, so no check() says "Correct!"
    printed = [_printed(c) for c in cells if c.cell_type == "code"]
    assert not any("Correct!" in text for text in printed), f"{notebook}: a solution ran"
    # every value the prose names as printed is printed, by a cell above (or below, where it says so);
    # a solution's own prose names what its code prints when the reader runs it, which Run all does not
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or cell.metadata.get("solution"):
            continue
        for name, where in PLACEHOLDER.findall(cell.source):
            others = cells[:i] if where == "above" else cells[i + 1:]
            lines = [ln for c in others if c.cell_type == "code" for ln in _printed(c).splitlines()]
            assert any(ln.startswith(f"{name} = ") for ln in lines), (
                f"{cell.id}: the text names `{name}` as printed {where}, but no cell {where} printed it")


def test_the_training_text_was_fetched_on_first_use(executed, readers):
    if "training" not in executed:
        pytest.skip("the training notebook was not selected in this run")
    fetched = readers.home / ".cache" / "linattn" / "data" / data.TARBALL
    assert fetched.is_file() and data.sha256_of(fetched) == data.SHA256
    assert sorted(p.name for p in fetched.parent.iterdir()) == [data.TARBALL]  # no partial file left


def test_the_wheel_carries_the_kernel_and_the_package_data(readers):
    names = set(zipfile.ZipFile(readers.wheel).namelist())
    for stored in sorted((ROOT / "linattn_core" / "lm" / "results").glob("*.json")):
        assert f"linattn_core/lm/results/{stored.name}" in names
    assert any(re.fullmatch(r"linattn_core/fast/_chunked\..*\.so", n) for n in names), "no compiled kernel"
    assert {f"linattn_core/fast/{name}" for name in kernel._SOURCES} <= names  # kernel.source() reads them


IMPORT_EVERYTHING = """
import ast, importlib, importlib.util, json, pkgutil, sys
from importlib import resources
from pathlib import Path
import linattn_core
from linattn_core.lm import stored

OPTIONAL = {"ImportError", "ModuleNotFoundError"}


def statements(code):
    # every import statement, nested ones too, except those a try guards with an ImportError fallback
    code = "\\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in code.splitlines())
    tree = ast.parse(code)
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            caught = set()
            for h in node.handlers:
                kinds = h.type.elts if isinstance(h.type, ast.Tuple) else [h.type]
                caught |= {k.id for k in kinds if isinstance(k, ast.Name)}
            if caught & OPTIONAL:
                optional |= {id(n) for s in node.body for n in ast.walk(s)}
    return [ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in optional
            and getattr(n, "level", 0) == 0]


failed, done = {}, 0
modules = [m.name for m in pkgutil.walk_packages(linattn_core.__path__, "linattn_core.")]
sources = []
for name in ["linattn_core", *modules]:
    try:
        module = importlib.import_module(name)
        done += 1
    except Exception as exc:
        failed[name] = repr(exc)
        continue
    if module.__file__.endswith(".py"):  # not the compiled kernel
        sources.append((name, Path(module.__file__).read_text(encoding="utf-8")))
for path in sys.argv[1:]:
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    sources += [(Path(path).name, "".join(c["source"])) for c in cells if c["cell_type"] == "code"]
for where, code in sources:
    for statement in statements(code):
        try:
            exec(statement, {})
            done += 1
        except Exception as exc:
            failed[f"{where}: {statement}"] = repr(exc)
found = sorted(p.name for p in (resources.files("linattn_core") / "lm" / "results").iterdir())
print(json.dumps({"failed": failed, "done": done, "package": linattn_core.__file__,
                  "stored": stored.names(), "resources": found,
                  "kernel": importlib.util.find_spec("linattn_core.fast._chunked") is not None}))
"""


def test_every_module_a_notebook_can_reach_imports(readers):
    """In the fresh environment: every linattn_core module, every import inside them (lazy ones too) and
    every import statement of every notebook cell; the package is the installed one, with its data."""
    script = readers.base / "import_everything.py"
    script.write_text(IMPORT_EVERYTHING)
    done = _run([str(readers.python), str(script), *map(str, NOTEBOOKS)], cwd=readers.run_dir,
                env=readers.env())
    report = json.loads(done.stdout.splitlines()[-1])
    assert not report["failed"], f"not importable where readers run the notebooks: {report['failed']}"
    assert report["done"] > 50
    site = readers.base / "venv"
    assert Path(report["package"]).is_relative_to(site), f"imported {report['package']}, not the wheel"
    want = sorted(p.name for p in (ROOT / "linattn_core" / "lm" / "results").glob("*.json"))
    assert report["stored"] == want and report["resources"] == want
    assert report["kernel"], "the compiled kernel did not come along with the wheel"
