"""`make fuzz`: run the whole input fuzzer (tests/fuzz/fuzzlib.py) and print the counts.

    python tests/fuzz/run_fuzz.py [--seed 0] [--n 3000] [--workers N] [--timeout 10] [--show 40]

Exit 0 when every case keeps the CLI contract, 1 otherwise (each violating case is printed with the
command line that reproduces it; the case's files are kept under --keep DIR when given).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzzlib  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=3000, help="cases to generate")
    ap.add_argument("--start", type=int, default=0, help="first case index (a sample is a prefix)")
    ap.add_argument("--workers", type=int, default=max(1, min(8, (os.cpu_count() or 2))))
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    ap.add_argument("--show", type=int, default=40, help="violating cases to print")
    ap.add_argument("--keep", type=Path, help="keep the cases' folders here")
    ap.add_argument("--family", help="only cases of this family (prefix)")
    ap.add_argument("--no-retry", action="store_true", help="do not run timed-out cases again alone (3x the time)")
    ap.add_argument("--repro", type=int, metavar="I", help="write case I of the seed under --keep (default ./fuzz-case) "
                    "and run it as a subprocess with BAIGE_PLAN_DEBUG=1 (a traceback for an internal error)")
    a = ap.parse_args()
    if a.repro is not None:
        return repro(a.seed, a.repro, a.keep or Path("fuzz-case"))

    root = a.keep or Path(tempfile.mkdtemp(prefix="baige-fuzz-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    fixtures = fuzzlib.make_fixtures(root / "fixtures")
    cases = fuzzlib.generate(a.seed, a.n, fixtures, start=a.start)
    if a.family:
        cases = [c for c in cases if c.family.startswith(a.family)]
    for c in cases:
        c.timeout = a.timeout

    def progress(done: int, total: int) -> None:
        if done % 100 == 0 or done == total:
            print(f"\r{done}/{total} ({time.monotonic() - t0:.0f} s)", end="", file=sys.stderr, flush=True)

    try:
        results, validated = fuzzlib.run_all(cases, a.workers, root, progress=progress, retry=not a.no_retry)
    finally:
        if a.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(file=sys.stderr)
    summary, bad = fuzzlib.report(results, validated)
    print(summary)
    print(f"seconds: {time.monotonic() - t0:.1f} on {a.workers} workers (seed {a.seed}, cases {a.start}.."
          f"{a.start + a.n - 1})")
    for r, v in bad[:a.show]:
        print(fuzzlib.describe(r, v))
    shown = set()
    for r in results:           # one example of each known crash, with the line that reproduces it
        why = fuzzlib.known(r) if fuzzlib.violations(r, validated.get(r.case.id)) else None
        if why and why not in shown:
            shown.add(why)
            i = int(r.case.id.split("-")[1])
            print(f"known: {why}\n  e.g. python tests/fuzz/run_fuzz.py --seed {a.seed} --repro {i}\n"
                  + fuzzlib.describe(r, [r.exception or "see stderr"]))
    if len(bad) > a.show:
        print(f"... and {len(bad) - a.show} more")
    return 1 if bad else 0


def repro(seed: int, i: int, root: Path) -> int:
    import subprocess
    root = root.resolve()
    fixtures = fuzzlib.make_fixtures(root / "fixtures")
    case = fuzzlib.generate(seed, 1, fixtures, start=i)[0]
    d = fuzzlib.materialize(case, root)
    env = dict(os.environ, BAIGE_PLAN_DEBUG="1", **case.env)
    print(f"[{case.id}] in {d}:\n  baige-plan " + " ".join(case.args), file=sys.stderr)
    try:
        r = subprocess.run([sys.executable, "-m", "baige_plan", *case.args], cwd=d, env=env, timeout=case.timeout)
    except subprocess.TimeoutExpired:
        print(f"timeout after {case.timeout} s", file=sys.stderr)
        return 1
    print(f"exit {r.returncode}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
