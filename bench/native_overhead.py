"""Added nanoseconds per hooked driver call, by the wall clock: the same program with and
without the core.

Runs nodeagent/native/build/bench/overhead on the simulated GPU, alternating plain and
preloaded runs (so machine noise hits both alike), and reports the median per-call wall time of
each and the difference, with the thread's CPU time beside it. Every configuration runs in the
device's primary context and in a cuCtxCreate context, on a slice with a 100 % compute share
(launches counted, not metered) and at a metered share (50 % by default) whose budget the
launch loop does not exhaust: its kernels are 20 ns and each launch is followed by a spin of
--gap iterations (about 1.8 us at the default 2000; each launch is timed around the call
alone), so that even what the meter charges a tiny kernel (about the launch call: a sample on
an idle stream times the submission) stays well below the share, and the metered figure is
the hook's cost. What the throttle still did is measured apart, from the region: the share of
the launch loops' wall time spent waiting for budget, and the device share charged. Each
figure is the median chunk of 1,000 calls (a chunk in which the thread was descheduled is an
outlier). Goals (issue #44): unmetered launch <= +15 ns, metered (share not exhausted)
<= +50 ns, alloc+free <= +50 ns (a created context included), async alloc+free <= +150 ns at a
metered share.

    .venv/bin/python bench/native_overhead.py [--rounds 5] [--iters 50000] [--share 50]
        [--kernel-ns 20] [--gap 2000] [--baseline LIB]

--baseline LIB adds columns for another build of libtranche-test.so (e.g. an older commit's;
a test variant, since the bench gives each run its own config and region paths) run in the
same alternation, so a change's cost is seen side by side with the goal.

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

from nodeagent import region, sliceconfig  # noqa: E402

NATIVE = ROOT / "nodeagent" / "native"
BUILD = NATIVE / "build"
LAUNCH = "cuLaunchKernel"
SIM_UUID0 = "GPU-51a1a7ed-0000-4000-8000-000000000000"
CONTEXTS = ("primary", "created")

# The test variant: the same hooks, but it takes the two paths from the environment (the
# shipped core reads only the fixed in-container paths).
CORE = BUILD / "libtranche-test.so"


def goal(call: str, metered: bool) -> float | None:
    if call == LAUNCH:
        return 50.0 if metered else 15.0
    return {"cuMemAlloc+cuMemFree": 50.0, "cuMemAllocAsync+cuMemFreeAsync": 150.0}.get(call)


class Config:
    """One way to run the bench program: no core, or a core at a share, in one context."""

    def __init__(self, tmp: Path, lib: Path | None, percent: int, ctx: str, tag: str) -> None:
        self.lib, self.percent, self.ctx, self.tag = lib, percent, ctx, tag
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRANCHE_", "LD_PRE"))}
        env.update(SIMGPU_STATE=str(tmp / "state"), LD_LIBRARY_PATH=str(BUILD / "simgpu"))
        self.region: Path | None = None
        if lib is not None:
            cfg = sliceconfig.SliceConfig(
                "bench/overhead", (sliceconfig.DeviceSlice(SIM_UUID0, 16 << 30, percent),)
            )
            conf = tmp / f"slice-{tag}-{percent}-{ctx}.conf"
            sliceconfig.write(conf, cfg)
            self.region = tmp / f"region-{tag}-{percent}-{ctx}"
            self.region.mkdir()
            env.update(
                TRANCHE_SLICE_CONFIG=str(conf),
                TRANCHE_REGION_DIR=str(self.region),
                LD_PRELOAD=str(lib),
            )
        self.env = env
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self.loop_ns = 0
        self.throttled_ns = 0
        self.charged_ns = 0

    def _device(self) -> tuple[int, int]:
        if self.region is None or not (self.region / region.REGION_FILE).exists():
            return 0, 0
        d = region.read_region(self.region).devices[0]
        return d.throttled_ns, d.compute_used_ns

    def run(self, iters: int, kernel_ns: int, gap: int) -> None:
        before = self._device()
        out = subprocess.run(
            [str(BUILD / "bench" / "overhead"), str(iters), self.ctx, str(kernel_ns), str(gap)],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        after = self._device()
        self.throttled_ns += after[0] - before[0]
        self.charged_ns += after[1] - before[1]
        for line in out.splitlines():
            if line.startswith("launch_loop_ns "):
                self.loop_ns += int(line.split()[1])
                continue
            name, wall, cpu = line.rsplit(" ", 2)
            self.wall.setdefault(name, []).append(float(wall))
            self.cpu.setdefault(name, []).append(float(cpu))

    def median(self, call: str, clock: str) -> float:
        return statistics.median((self.wall if clock == "wall" else self.cpu)[call])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50000)
    ap.add_argument("--share", type=int, default=50, help="the metered share, percent")
    ap.add_argument("--kernel-ns", type=int, default=20, help="each launched kernel's length")
    ap.add_argument("--gap", type=int, default=2000, help="spin iterations after each launch")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--baseline", type=Path, help="another libtranche-test.so, side by side")
    args = ap.parse_args()
    subprocess.run(["make", "-C", str(NATIVE), "-j2", "all"], check=True, capture_output=True)
    libs: dict[str, Path] = {"core": CORE}
    if args.baseline:
        libs["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        plain = {ctx: Config(tmp, None, 100, ctx, "plain") for ctx in CONTEXTS}
        cores = {
            (name, pct, ctx): Config(tmp, lib, pct, ctx, name)
            for name, lib in libs.items()
            for pct in (100, args.share)
            for ctx in CONTEXTS
        }
        for _ in range(args.rounds):
            for ctx in CONTEXTS:
                plain[ctx].run(args.iters, args.kernel_ns, args.gap)
                for (_, _, c), cfg in cores.items():
                    if c == ctx:
                        cfg.run(args.iters, args.kernel_ns, args.gap)
    report, figures = _report(args, plain, cores, list(libs))
    print(report)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "native_overhead.txt").write_text(report + "\n")
    (args.out / "native_overhead.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def _report(
    args: argparse.Namespace,
    plain: dict[str, Config],
    cores: dict[tuple[str, int, str], Config],
    names: list[str],
) -> tuple[str, dict[str, object]]:
    head = f"{'call':32} {'context':8} {'share':>5} {'plain':>8} {'core':>8} {'added':>7}"
    head += f" {'cpu+':>6}"
    for name in names[1:]:
        head += f" {name:>8} {'added':>7}"
    lines = [head + "  goal (wall ns added)"]
    figures: dict[str, object] = {}
    calls = list(plain[CONTEXTS[0]].wall)
    for call in calls:
        for pct in (100, args.share):
            for ctx in CONTEXTS:
                base = plain[ctx].median(call, "wall")
                core = cores[("core", pct, ctx)]
                added = core.median(call, "wall") - base
                cpu_added = core.median(call, "cpu") - plain[ctx].median(call, "cpu")
                row = f"{call:32} {ctx:8} {pct:4}% {base:8.1f} {core.median(call, 'wall'):8.1f}"
                row += f" {added:7.1f} {cpu_added:6.1f}"
                for name in names[1:]:
                    other = cores[(name, pct, ctx)].median(call, "wall")
                    row += f" {other:8.1f} {other - base:7.1f}"
                g = goal(call, pct < 100)
                row += "" if g is None else f"  <= {g:.0f} {'ok' if added <= g else 'MISSED'}"
                lines.append(row)
                figures[f"{call} {ctx} {pct}%"] = {
                    "plain_wall_ns": base,
                    "core_wall_ns": core.median(call, "wall"),
                    "added_wall_ns": added,
                    "added_cpu_ns": cpu_added,
                    "goal_ns": g,
                }
    lines.append("")
    lines.append(
        f"the throttle at {args.share} % (launch loops of {args.kernel_ns} ns kernels, "
        f"{args.gap} spins apart):"
    )
    for name in names:
        for ctx in CONTEXTS:
            cfg = cores[(name, args.share, ctx)]
            waited = 100.0 * cfg.throttled_ns / cfg.loop_ns if cfg.loop_ns else 0.0
            charged = 100.0 * cfg.charged_ns / cfg.loop_ns if cfg.loop_ns else 0.0
            lines.append(
                f"  {name:8} {ctx:8} waited {waited:5.1f} % of the loops' wall time, "
                f"device charged {charged:5.1f} % (the share yields nothing while waited is 0)"
            )
            figures[f"throttle {name} {ctx} {args.share}%"] = {
                "waited_pct": waited,
                "charged_pct": charged,
            }
    lines.append(
        f"(wall-clock medians of {args.rounds} alternating runs x 9 rounds x {args.iters} "
        f"calls, cpu+: thread CPU time added; simulated GPU, load average "
        f"{os.getloadavg()[0]:.1f})"
    )
    return "\n".join(lines), figures


if __name__ == "__main__":
    raise SystemExit(main())
