"""Run commands at the same time, every line they print prefixed with the command's name; exit 1 if any
failed, naming it. ``make test`` builds the site beside the tests that do not read it::

    python scripts/side_by_side.py build="make build" tests="make test-beside-build"

Each command runs in a shell of its own until it ends (one failing does not stop the others), so a run
reports every failure at once.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time


def _pump(name: str, stream, lock: threading.Lock) -> None:
    for line in iter(stream.readline, b""):
        with lock:
            sys.stdout.buffer.write(name.encode() + line)
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    jobs = [arg.split("=", 1) for arg in argv]
    if not jobs or any(len(job) != 2 or not all(job) for job in jobs):
        print(__doc__, file=sys.stderr)
        print(f"every argument must be NAME=COMMAND, got {argv}", file=sys.stderr)
        return 2
    width = max(len(name) for name, _ in jobs)
    lock, running, start = threading.Lock(), [], time.perf_counter()
    for name, command in jobs:
        process = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        pump = threading.Thread(target=_pump, args=(f"[{name:<{width}}] ", process.stdout, lock), daemon=True)
        pump.start()
        running.append((name, process, pump))
    failed = []
    for name, process, pump in running:
        code = process.wait()
        pump.join()
        print(f"[{name:<{width}}] exit {code} after {time.perf_counter() - start:.0f} s", flush=True)
        if code:
            failed.append(f"{name} (exit {code})")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
