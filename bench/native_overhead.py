"""Added nanoseconds per hooked driver call: the same program with and without the core.

Runs nodeagent/native/build/bench/overhead on the simulated GPU, alternating plain and
preloaded runs (so machine noise hits both alike), and reports the median per-call time of
each and the difference. The core runs twice: on a slice with a 100 % compute share (launches
counted, not metered) and at 50 % ("cuLaunchKernel (metered)": every launch looked up,
estimated and charged). Each round is timed by the thread's CPU clock (--clock cpu, the
default): on a machine shared with other work the time a thread spends descheduled is not the
call's cost, and neither is the time the meter makes a launch sleep for budget (a zero-length
kernel still costs what its event pair measures, so at 50 % the launch loop does wait; the
meter's system calls for it are counted). --clock wall times by CLOCK_MONOTONIC instead.
Goals (issue #27): metered launch <= +50 ns, unmetered <= +15 ns, alloc+free <= +50 ns,
async alloc+free <= +150 ns.

    .venv/bin/python bench/native_overhead.py [--rounds 5] [--iters 200000] [--baseline LIB]

--baseline LIB adds a third column: another build of libtranche-test.so (e.g. the previous
commit's; a test variant, since the bench gives each run its own config and region paths)
run in the same alternation, so a change's cost is seen side by side with the goal.

Figures are printed and written to bench/results/native_overhead.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nodeagent import sliceconfig  # noqa: E402

NATIVE = ROOT / "nodeagent" / "native"
BUILD = NATIVE / "build"
GOALS = {
    "cuLaunchKernel": 15.0,
    "cuLaunchKernel (metered)": 50.0,
    "cuMemAlloc+cuMemFree": 50.0,
    "cuMemAllocAsync+cuMemFreeAsync": 150.0,
}
METERED = "cuLaunchKernel (metered)"
SIM_UUID0 = "GPU-51a1a7ed-0000-4000-8000-000000000000"


# The test variant: the same hooks, but it takes the two paths from the environment (the
# shipped core reads only the fixed in-container paths).
CORE = BUILD / "libtranche-test.so"


def _env(tmp: Path, percent: int | None, lib: Path = CORE, tag: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANCHE_", "LD_PRELOAD"))}
    env.update(SIMGPU_STATE=str(tmp / "state"), LD_LIBRARY_PATH=str(BUILD / "simgpu"))
    if percent is not None:
        cfg = sliceconfig.SliceConfig(
            "bench/overhead", (sliceconfig.DeviceSlice(SIM_UUID0, 16 << 30, percent),)
        )
        conf = tmp / f"slice-{lib.parent.name}{tag}.conf"
        sliceconfig.write(conf, cfg)
        region = tmp / f"region-{lib.parent.name}{tag}"
        region.mkdir(exist_ok=True)
        env.update(
            TRANCHE_SLICE_CONFIG=str(conf),
            TRANCHE_REGION_DIR=str(region),
            LD_PRELOAD=str(lib),
        )
    return env


def _run(env: dict[str, str], iters: int, clock: str) -> dict[str, float]:
    out = subprocess.run(
        [str(BUILD / "bench" / "overhead"), str(iters), clock],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.splitlines()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--baseline", type=Path, help="another libtranche.so to run side by side")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = ap.parse_args()
    subprocess.run(["make", "-C", str(NATIVE), "-j2", "all"], check=True, capture_output=True)
    libs = {"plain": None, "core": CORE}
    if args.baseline:
        libs["baseline"] = args.baseline.resolve()
    samples: dict[str, dict[str, list[float]]] = {v: {} for v in libs}
    with tempfile.TemporaryDirectory() as d:
        envs = {
            name: _env(Path(d), None) if lib is None else _env(Path(d), 100, lib, name)
            for name, lib in libs.items()
        }
        metered = {n: _env(Path(d), 50, lib, f"{n}-50") for n, lib in libs.items() if lib}
        for _ in range(args.rounds):
            for name, env in envs.items():
                for call, ns in _run(env, args.iters, args.clock).items():
                    samples[name].setdefault(call, []).append(ns)
                if name in metered:
                    ns = _run(metered[name], args.iters, args.clock)["cuLaunchKernel"]
                    samples[name].setdefault(METERED, []).append(ns)
        samples["plain"][METERED] = samples["plain"]["cuLaunchKernel"]
    med = {v: {c: statistics.median(x) for c, x in s.items()} for v, s in samples.items()}
    extra = "baseline" in med
    head = f"{'call':32} {'plain ns':>9} {'core ns':>9} {'added':>7}"
    lines = [head + (f" {'baseline':>9} {'added':>7}" if extra else "") + "  goal"]
    for call, base in med["plain"].items():
        added = med["core"][call] - base
        goal = GOALS.get(call)
        verdict = "" if goal is None else f"<= {goal:.0f} {'ok' if added <= goal else 'MISSED'}"
        row = f"{call:32} {base:9.1f} {med['core'][call]:9.1f} {added:7.1f}"
        if extra:
            row += f" {med['baseline'][call]:9.1f} {med['baseline'][call] - base:7.1f}"
        lines.append(f"{row}  {verdict}")
    lines.append(
        f"(medians of {args.rounds} alternating runs x {args.iters} calls, {args.clock} time, "
        f"simulated GPU, load average {os.getloadavg()[0]:.1f})"
    )
    report = "\n".join(lines)
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "native_overhead.txt").write_text(report + "\n")
    (args.out / "native_overhead.json").write_text(json.dumps(med, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
