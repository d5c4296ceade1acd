"""Soak: page clients, reporting agents and live pages together for a while; is anything behind?

Run: `.venv/bin/python bench/soak.py [--seconds 600] [--clients 20] [--agents 8]`.

The portal as the chart runs it (`bench/load.py`'s `start_portal`: production settings,
`portal.serve` one process per core, the agents' ingest its own process group) on issue #18's
seeded fleet (`tranche_load`). For `--seconds`, all at once:
- `--clients` closed-loop page clients (quota and live page alternating, no think time);
- `--agents` node agents each sending a frame of all 32 of its pods at `--hz` (2/s) to the
  ingest: "stored" is the frame's ack (the portal acks after its transaction), p99 of its lag;
- 5 live pages of the measured project while its node's agent sends one pod's frame at `--hz`:
  lag p99 from send to the page's socket receiving it;
- memory: resident set of every portal process (pages and ingest), sampled every 5 s.
Prints the figures with the load average and writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import load  # sets this bench's database and pool before Django


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def main() -> None:  # noqa: PLR0915 (one scenario, read top to bottom)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--hz", type=float, default=2.0)
    parser.add_argument("--orgs", type=int, default=500)
    args = parser.parse_args()
    import django

    os.environ["TRANCHE_DB_STATEMENT_TIMEOUT_MS"] = "0"  # the seeding's bulk inserts
    load.prepare_database()
    django.setup()
    from bench.scalekit import pages
    from bench.scalekit.agent_load import AgentLoad
    from bench.scalekit.fleet_rows import seed_fleet

    fleet = seed_fleet(orgs=args.orgs)
    os.environ.pop("TRANCHE_DB_STATEMENT_TIMEOUT_MS")
    port = load.free_port()
    url = f"http://127.0.0.1:{port}"
    log = Path(tempfile.mkdtemp(prefix="tranche-soak-")) / "portal.log"
    portal = load.start_portal(port, log)
    load_avg = [os.getloadavg()[0]]
    memory: list[float] = []
    result: dict = {}
    try:
        pids = lambda: load.tree_pids(portal.pid) + load.tree_pids(portal.ingest.pid)  # noqa: E731
        cookies = [pages.login(url, fleet.username, fleet.password) for _ in range(5)]
        agents = dict([(n, a) for n, a in fleet.agents.items() if n != fleet.node][: args.agents])
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(5):
                memory.append(rss_mib(pids()))
                load_avg.append(os.getloadavg()[0])

        def page_clients() -> None:
            result["pages"] = pages.closed_loop(url, cookies, fleet.project_id, args.clients,
                                                args.seconds)  # fmt: skip

        memory.append(rss_mib(pids()))
        threads = [threading.Thread(target=f, daemon=True) for f in (sample, page_clients)]
        with AgentLoad(portal.ingest_url, agents, args.hz) as agent_load:
            for t in threads:
                t.start()
            result["live"] = pages.measure_fanout(
                url, fleet.username, fleet.password, fleet.project_id, fleet.node,
                fleet.node_token, 5, args.hz, args.seconds, pod=fleet.pod,
            )  # fmt: skip
            threads[1].join(args.seconds + 180)
        stop.set()
        result["agents"] = agent_load.summary()
    finally:
        load.stop_portal(portal)
    result.update(seconds=args.seconds, clients=args.clients, agents=len(agents), hz=args.hz,
                  memory_mib=memory, load_average=load_avg)  # fmt: skip
    quarter = max(1, len(memory) // 4)
    first, last = sum(memory[:quarter]) / quarter, sum(memory[-quarter:]) / quarter
    print(
        f"soak {args.seconds:.0f} s: {args.clients} page clients, {len(agents)} agents x 32 "
        f"pods at {args.hz}/s, 5 live pages; load average {min(load_avg):.1f}-{max(load_avg):.1f}"
    )
    print(
        f"  frames stored (acked): {result['agents']['frames_acked']}, "
        f"lag p50 {result['agents']['ack_lag_p50_s']} s, p99 {result['agents']['ack_lag_p99_s']} s"
    )
    print(
        f"  live page lag p50 {result['live']['lag_p50_s']} s, p99 {result['live']['lag_p99_s']} s"
        f", {result['live']['deliveries']} of {result['live']['expected_deliveries']} delivered"
    )
    q = result["pages"]
    print(
        f"  pages: {q['per_s']}/s, quota p95 {q['quota']['p95_ms']} ms, live p95 "
        f"{q['live']['p95_ms']} ms, errors {q['quota']['errors'] + q['live']['errors']}"
    )
    print(
        f"  portal memory (all processes): first quarter {first:.0f} MiB, last quarter "
        f"{last:.0f} MiB, peak {max(memory):.0f} MiB"
    )
    out = load.ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.json").write_text(json.dumps(result, indent=1))
    print(f"results: {out / 'soak.json'}")


if __name__ == "__main__":
    main()
