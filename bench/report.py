"""The table: medians of the runs, the baseline's, their ratio, the target, and each figure's spread."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Samples = dict[str, list[float]]
# A row's target as text, and the test on (ours, ratio) that meets it.
Target = tuple[str, Callable[[float, float | None], bool] | None]


@dataclass(frozen=True)
class Row:
    label: str
    ours: str  # key of our samples
    base: str | None  # key of the baseline's samples (or of our own reference figure)
    unit: str
    # The target, as text, and the test on (ours, ratio) that meets it.
    target: str = ""
    met: Callable[[float, float | None], bool] | None = None


def median(samples: Samples, key: str) -> float | None:
    values = samples.get(key)
    return statistics.median(values) if values else None


def spread(samples: Samples, key: str) -> str:
    """The runs' range around their median, as ± percent: the machine's noise on this figure."""
    values = samples.get(key) or []
    if len(values) < 2:
        return "n/a"
    middle = statistics.median(values)
    if not middle:
        return "n/a"
    return f"±{(max(values) - min(values)) / 2 / middle * 100:.0f}%"


def figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "count":
        return f"{value:,.0f}"
    return f"{value:,.0f}/s"


def render(title: str, rows: list[Row], samples: Samples) -> str:
    header = ["measure", "ours", "(noise)", "baseline", "(noise)", "ratio", "target", "met"]
    table = [header]
    for row in rows:
        ours = median(samples, row.ours)
        base = median(samples, row.base) if row.base else None
        ratio = ours / base if ours is not None and base else None
        met = ""
        if row.met is not None and ours is not None:
            met = "yes" if row.met(ours, ratio) else "NO"
        table.append(
            [
                row.label,
                figure(ours, row.unit),
                spread(samples, row.ours),
                figure(base, row.unit) if row.base else "",
                spread(samples, row.base) if row.base else "",
                f"{ratio:.2f}×" if ratio is not None else "",
                row.target,
                met,
            ]
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = [f"### {title}", ""]
    for index, line in enumerate(table):
        lines.append(
            "| " + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) + " |"
        )
        if index == 0:
            lines.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)


def paired(samples: Samples, rows: list[Row]) -> str:
    """Each row's ratio run by run, and their median: the two sides of a run met the same load.

    The table's ratio is of the medians; when other work comes and goes
    between runs, the median of the runs' own ratios is the steadier figure.
    """
    lines = []
    for row in rows:
        ours, base = samples.get(row.ours) or [], samples.get(row.base or "") or []
        if row.unit not in ("/s", "ms") or not ours or len(ours) != len(base):
            continue
        ratios = [o / b for o, b in zip(ours, base, strict=True) if b]
        each = " · ".join(f"{ratio:.2f}×" for ratio in ratios)
        lines.append(f"- {row.label}: {each}; median {statistics.median(ratios):.2f}×")
    return "\n".join(lines)


def postgresql_rows(samples: Samples, concurrencies: list[int]) -> list[Row]:
    best = int(samples["best_concurrency"][0])
    rows = [
        Row("enqueue(), one transaction each", "enqueue", "raw_insert", "/s", "≥ 0.6×", _ratio(0.6)),
        Row("enqueue_many() of 10,000 vs COPY", "enqueue_many", "raw_copy", "/s", "≥ 0.5×", _ratio(0.5)),
        # No Python per job: what the job table's columns and indexes allow a batch.
        Row("COPY of 10,000 ready-made rows into the job table", "job_table_copy", "raw_copy", "/s"),
        Row("enqueue_many() of 10,000 vs that COPY", "enqueue_many", "job_table_copy", "/s"),
        Row("drain, --concurrency 1 vs raw batch 1", "drain_c1", "raw_claim_ack_1", "/s"),
        Row("drain, --concurrency 1 vs raw batch 100 just before", "drain_c1", "raw_claim_ack_100_c1", "/s"),
        Row(
            "drain, defaults (10 threads) vs raw batch 100 just before",
            "drain_defaults",
            "raw_claim_ack_100_defaults",
            "/s",
        ),
    ]
    for concurrency in concurrencies:
        if concurrency == 1:
            continue
        target, met = ("≥ 0.5×", _ratio(0.5)) if concurrency == best else ("", None)
        rows.append(
            Row(
                f"drain, --concurrency {concurrency} vs raw batch 100 just before",
                f"drain_c{concurrency}",
                f"raw_claim_ack_100_c{concurrency}",
                "/s",
                target,
                met,
            )
        )
    rows += [
        _delete_on_ack_row(best),
        Row("raw claim + ack, batch 10", "raw_claim_ack_10", None, "/s"),
        # The same baseline at each run's start, beside batches 1 and 10: how far it drifts.
        Row("raw claim + ack, batch 100, at each run's start", "raw_claim_ack_100", None, "/s"),
        Row(
            f"drain behind 1,000,000 vs 10,000 (c={best})",
            "drain_backlog",
            f"drain_c{best}",
            "/s",
            "≥ 0.8×",
            _ratio(0.8),
        ),
        Row(
            "idle pickup p50",
            "pickup_p50",
            "raw_pickup_p50",
            "ms",
            "≤ 2×",
            lambda _o, r: r is not None and r <= 2,
        ),
        Row("idle pickup p95", "pickup_p95", "raw_pickup_p95", "ms"),
        Row("idle pickup p99", "pickup_p99", "raw_pickup_p99", "ms", "≤ 10 ms", lambda o, _r: o <= 10),
    ]
    for concurrency in concurrencies:
        target, met = ("≤ 80 MB", lambda o, _r: o <= 80) if concurrency == 8 else ("", None)
        label = f"worker peak RSS, --concurrency {concurrency}"
        rows.append(Row(label, f"rss_c{concurrency}", None, "MB", target, met))
    return rows


def asyncio_rows(samples: Samples, cfg: dict[str, Any]) -> list[Row]:
    """``--pool asyncio`` (bench/asyncio_pool.py): many waits at once, its no-op drain against threads'."""
    waits, seconds = cfg["asyncio_io_jobs"], cfg["asyncio_io_seconds"]
    what = f"{waits:,} jobs awaiting {seconds:g} s"
    rows = [
        Row(
            f"{what}, --pool asyncio --concurrency {waits}: first start to last end",
            f"aio_io_asyncio_c{waits}_span",
            None,
            "s",
            "≤ 3 s",
            lambda ours, _ratio: ours <= 3,
        ),
        Row(
            f"{what}, --pool asyncio --concurrency {waits}: worker's peak RSS",
            f"aio_io_asyncio_c{waits}_rss",
            None,
            "MB",
            "< 150 MB",
            lambda ours, _ratio: ours < 150,
        ),
    ]
    for concurrency in cfg["asyncio_thread_io"]:
        rows += [
            Row(
                f"{what}, --pool threads --concurrency {concurrency}",
                f"aio_io_threads_c{concurrency}_span",
                None,
                "s",
            ),
            Row(
                f"{what}, --pool threads --concurrency {concurrency}: peak RSS",
                f"aio_io_threads_c{concurrency}_rss",
                None,
                "MB",
            ),
        ]
    for pool, concurrencies in (
        ("asyncio", cfg["asyncio_concurrencies"]),
        ("threads", cfg["asyncio_thread_concurrencies"]),
    ):
        job = "coroutine" if pool == "asyncio" else "plain function"
        rows += [
            Row(f"no-op {job} drain, --pool {pool} --concurrency {c}", f"aio_noop_{pool}_c{c}", None, "/s")
            for c in concurrencies
        ]
    rows.append(
        Row(
            "no-op drain, each run's best: --pool asyncio (coroutines) vs --pool threads (plain functions)",
            "aio_noop_asyncio_best",
            "aio_noop_threads_best",
            "/s",
            "≥ 0.8×",
            _ratio(0.8),
        )
    )
    return rows


def pool_rows(samples: Samples, cfg: dict[str, Any]) -> list[Row]:
    """``--pool processes`` against the thread pool: each row's baseline is the thread pool's figure."""
    judged = cfg["pool_judged_concurrency"]
    rows = [
        Row("bench.spin, CPU time of one call in the benchmark's process", "spin_ms", None, "ms"),
        # No queue at all: the most any pool can gain on this machine's cores.
        Row("bench.spin, no queue: 2 processes at once vs 1", "spin_2_processes", "spin_1_process", "/s"),
    ]
    for concurrency in cfg["pool_concurrencies"]:
        # Issue 15's bars, read at one concurrency; the others are shown for comparison.
        cpu: Target = ("≥ 1.8×", _ratio(1.8)) if concurrency == judged else ("", None)
        noop: Target = ("≥ 0.5×", _ratio(0.5)) if concurrency == judged else ("", None)
        rows += [
            Row(
                f"CPU-bound drain, --concurrency {concurrency}: processes vs threads",
                f"cpu_processes_c{concurrency}",
                f"cpu_threads_c{concurrency}",
                "/s",
                *cpu,
            ),
            Row(
                f"no-op drain, --concurrency {concurrency}: processes vs threads",
                f"noop_processes_c{concurrency}",
                f"noop_threads_c{concurrency}",
                "/s",
                *noop,
            ),
        ]
    # Issue 19's bar: the process pool's no-op drain against the raw baseline, measured right before it.
    for concurrency in cfg["pool_concurrencies"]:
        bar: Target = ("≥ 0.6×", _ratio(0.6)) if concurrency == cfg["pool_raw_concurrency"] else ("", None)
        rows.append(
            Row(
                f"no-op drain, --pool processes at --concurrency {concurrency} vs raw claim+ack batch 100",
                f"noop_processes_c{concurrency}",
                f"pool_raw_claim_ack_100_c{concurrency}",
                "/s",
                *bar,
            )
        )
    slots = cfg["pool_memory_concurrency"]
    rows += [
        Row(f"thread pool, --concurrency {slots}: worker RSS", "mem_threads_rss", None, "MB"),
        Row(f"thread pool, --concurrency {slots}: worker PSS", "mem_threads_pss", None, "MB"),
        Row(
            "processes: worker (parent) RSS vs the thread pool's",
            "mem_processes_rss",
            "mem_threads_rss",
            "MB",
        ),
        Row("processes: fork server RSS", "mem_fork_server_rss", None, "MB"),
        Row(f"processes: {slots} children, RSS summed", "mem_children_rss", None, "MB"),
        Row(f"processes: {slots} children, PSS summed", "mem_children_pss", None, "MB"),
        Row("processes: multiprocessing's resource tracker, PSS", "mem_helpers_pss", None, "MB"),
        Row(
            "processes: PSS of the worker and all its descendants vs the thread pool's",
            "mem_processes_total_pss",
            "mem_threads_total_pss",
            "MB",
        ),
    ]
    return rows


def against_rows(samples: Samples, cfg: dict[str, Any]) -> list[Row]:
    """The thread pool's no-op drains of this tree, each against the same drain of the other commit."""
    ref = cfg["against"]["ref"]
    return [
        Row(
            f"drain, --concurrency {concurrency}: this tree vs {ref}",
            f"here_drain_c{concurrency}",
            f"there_drain_c{concurrency}",
            "/s",
            "≥ 0.95×",
            _ratio(0.95),
        )
        for concurrency in cfg["against_concurrencies"]
    ]


def peer_rows() -> list[Row]:
    """runworker at its defaults against pgqueuer at its own (bench/pgqueuer_peer.py), then at others."""
    return [
        Row(
            "drain at defaults: runworker vs pgqueuer",
            "peer_ours",
            "peer_pgqueuer",
            "/s",
            "≥ 1.0×",
            _ratio(1.0),
        ),
        # For comparison only: pgqueuer on its other driver, and claiming and acking 100 at a time.
        Row("runworker at defaults vs pgqueuer on psycopg", "peer_ours", "peer_pgqueuer_psycopg", "/s"),
        Row("runworker at defaults vs pgqueuer --batch-size 100", "peer_ours", "peer_pgqueuer_b100", "/s"),
        Row("peak RSS at defaults: runworker vs pgqueuer", "peer_ours_rss", "peer_pgqueuer_rss", "MB"),
    ]


def pooler_rows() -> list[Row]:
    """An idle worker's pickup behind PgBouncer (bench/pooler.py), each against the direct one's."""
    return [
        Row(
            "idle pickup p50: behind PgBouncer, LISTEN direct, vs direct",
            "pooler_pooled_listen_p50",
            "pooler_direct_p50",
            "ms",
            "≤ 2×",
            lambda _o, r: r is not None and r <= 2,
        ),
        Row(
            "idle pickup p95: behind PgBouncer, LISTEN direct, vs direct",
            "pooler_pooled_listen_p95",
            "pooler_direct_p95",
            "ms",
        ),
        # The pooler's settings without the pooler: what of the above is theirs, not the hop's.
        Row(
            "idle pickup p50: direct, the pooler's settings, vs direct",
            "pooler_direct_unprepared_p50",
            "pooler_direct_p50",
            "ms",
        ),
        Row(
            "idle pickup p50: behind PgBouncer, LISTEN direct, vs direct with its settings",
            "pooler_pooled_listen_p50",
            "pooler_direct_unprepared_p50",
            "ms",
        ),
        # For contrast: no direct alias, a LISTEN through the pooler that hears nothing.
        Row(
            "idle pickup p50: behind PgBouncer, deaf, vs direct",
            "pooler_pooled_deaf_p50",
            "pooler_direct_p50",
            "ms",
        ),
        Row(
            "idle pickup p95: behind PgBouncer, deaf, vs direct",
            "pooler_pooled_deaf_p95",
            "pooler_direct_p95",
            "ms",
        ),
    ]


def pooler_notes(cfg: dict[str, Any]) -> str:
    return (
        f"Each: {cfg['pickup_jobs']} jobs {cfg['pickup_gap'] * 1000:g} ms apart, one idle runworker at its "
        "defaults. Direct: worker and producer on PostgreSQL. Behind PgBouncer (transaction mode): worker "
        "and producer through it, with the pooler's settings (PREPARED_STATEMENTS off, no server-side "
        "cursors); LISTEN direct = LISTEN_DATABASE on a direct alias; deaf = none, the worker polls "
        "every --poll-interval (1 s). Direct with the pooler's settings: those settings, no pooler."
    )


def flow_rows(samples: Samples, cfg: dict[str, Any]) -> list[Row]:
    """Each limited drain against the plain drain at its concurrency, and the claim rounds each took."""
    rows = []
    for concurrency in cfg["flow_concurrencies"]:
        limited, plain = f"flow_limited_c{concurrency}", f"flow_plain_c{concurrency}"
        rows += [
            Row(
                f"drain, --concurrency {concurrency}: limit 1 per key vs no keys",
                limited,
                plain,
                "/s",
                "≥ 0.7×",
                _ratio(0.7),
            ),
            # More rounds for as many jobs: the claims that took fewer than the free slots.
            Row(
                f"claim rounds, --concurrency {concurrency}: limited vs plain",
                f"{limited}_rounds",
                f"{plain}_rounds",
                "count",
            ),
        ]
    rows.append(
        Row(
            f"limited drain behind {cfg['backlog_jobs']:,} keyed jobs vs {cfg['drain_jobs']:,} "
            f"(c={cfg['flow_backlog_concurrency']})",
            "flow_backlog_drain",
            "flow_small_drain",
            "/s",
            "≥ 0.8×",
            _ratio(0.8),
        )
    )
    return rows


def flow_notes(samples: Samples, cfg: dict[str, Any]) -> str:
    """A line per drain that did not finish: its rate is not among the figures above."""
    lines = []
    for concurrency in cfg["flow_concurrencies"]:
        for side in ("limited", "plain"):
            key = f"flow_{side}_c{concurrency}"
            for done in samples.get(f"{key}_timeout", []):
                lines.append(
                    f"- {side} drain, --concurrency {concurrency}: stopped by its time bounds "
                    f"(flow_timeout {cfg['flow_timeout']:.0f}s, flow_stall {cfg['flow_stall']:.0f}s) "
                    f"after {done:,.0f} of {cfg['flow_jobs']:,} jobs"
                )
            for done in samples.get(f"{key}_short", []):
                lines.append(
                    f"- {side} drain, --concurrency {concurrency}: the worker exited having acked "
                    f"{done:,.0f} of {cfg['flow_jobs']:,} jobs"
                )
    return "\n".join(lines) or "Every drain finished."


def sqlite_rows(samples: Samples, concurrencies: list[int]) -> list[Row]:
    rows = [
        Row("enqueue(), one transaction each", "enqueue", "raw_insert", "/s"),
        Row("enqueue_many() of 10,000 vs executemany", "enqueue_many", "raw_copy", "/s"),
        Row("drain, --concurrency 1 vs raw batch 1", "drain_c1", "raw_claim_ack_1", "/s"),
        Row("drain, defaults (10 threads) vs raw batch 100", "drain_defaults", "raw_claim_ack_100", "/s"),
    ]
    for concurrency in concurrencies:
        rows.append(
            Row(
                f"drain, --concurrency {concurrency} vs raw batch 100",
                f"drain_c{concurrency}",
                "raw_claim_ack_100",
                "/s",
            )
        )
    rows.append(Row("raw claim + ack, batch 10", "raw_claim_ack_10", None, "/s"))
    return rows


def _delete_on_ack_row(best: int | None) -> Row:
    """The best concurrency's drain with KEEP_COMPLETED=0, a documented setting: judged on the target too."""
    return Row(
        f"drain, --concurrency {best}, KEEP_COMPLETED=0, vs raw batch 100 just before",
        "drain_best_delete",
        "raw_claim_ack_100_delete",
        "/s",
        "≥ 0.5×",
        _ratio(0.5),
    )


def mysql_rows(samples: Samples, concurrencies: list[int]) -> list[Row]:
    best = int(samples["best_concurrency"][0]) if samples.get("best_concurrency") else None
    rows = [
        Row("enqueue(), one transaction each", "enqueue", "raw_insert", "/s", "≥ 0.6×", _ratio(0.6)),
        Row(
            "enqueue_many() of 10,000 vs multi-row INSERTs",
            "enqueue_many",
            "raw_copy",
            "/s",
            "≥ 0.5×",
            _ratio(0.5),
        ),
        Row(
            f"best drain (--concurrency {best}) vs raw batch 100 just before",
            "drain_best",
            "raw_claim_ack_100_best",
            "/s",
            "≥ 0.5×",
            _ratio(0.5),
        ),
        _delete_on_ack_row(best),
        Row("drain, defaults (10 threads) vs raw batch 100", "drain_defaults", "raw_claim_ack_100", "/s"),
    ]
    # What the job table's own indexes allow (bench/mysql_ceiling.py): the baseline's statements there.
    rows += [
        Row(label, ours, baseline, "/s")
        for label, ours, baseline in (
            ("raw multi-row INSERTs into the job table vs the baseline's", "job_table_insert", "raw_copy"),
            ("enqueue_many() vs those INSERTs into the job table", "enqueue_many", "job_table_insert"),
            (
                "raw claim + ack, batch 100, on the job table vs the baseline's",
                "job_table_claim_ack_100",
                "raw_claim_ack_100",
            ),
            (
                f"best drain (--concurrency {best}) vs that on the job table",
                "drain_best",
                "job_table_claim_ack_100",
            ),
        )
    ]
    for concurrency in concurrencies:
        label = f"drain, --concurrency {concurrency} vs raw batch 100 just before"
        rows.append(Row(label, f"drain_c{concurrency}", f"raw_claim_ack_100_c{concurrency}", "/s"))
    rows += [
        Row("drain, --concurrency 1 vs raw batch 1", "drain_c1", "raw_claim_ack_1", "/s"),
        Row("raw claim + ack, batch 10", "raw_claim_ack_10", None, "/s"),
        Row(
            "idle pickup by poll p50 vs the poll interval",
            "pickup_p50",
            "poll_interval",
            "ms",
            "≤ 1×",
            lambda _o, r: r is not None and r <= 1,
        ),
        Row("idle pickup by poll p95", "pickup_p95", "poll_interval", "ms"),
        Row("idle pickup by poll p99", "pickup_p99", "poll_interval", "ms"),
    ]
    return rows


def _ratio(minimum: float) -> Callable[[float, float | None], bool]:
    return lambda _ours, ratio: ratio is not None and ratio >= minimum
