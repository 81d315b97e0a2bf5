"""The performance targets beside what a gpu-check report measured. Not a section: the targets read the results of
several sections (``sync_free``, ``rank_losses``, ``cuda_graphs``, ``detection_step``), so the report's first
table is made here from the whole report."""

from __future__ import annotations

from .common import format_gib, format_ms


def targets(report: dict) -> list[list]:
    """The performance targets beside what this report measured: ``[target, measured, met]`` rows (a
    target whose section did not run, or failed, is measured as ``-``)."""
    status = report["sections"]
    rows = []
    free = status.get("sync_free", {}).get("rows", [])
    if free:
        syncs = max(r["cuda_reported"] if r["cuda_reported"] is not None else r["dispatched"] for r in free)
        rows.append(["0 host syncs per loss call", f"at most {syncs}", syncs == 0])
    by_n = {r["n"]: r for r in status.get("rank_losses", {}).get("rows", []) if not r["detection_sequence"]}
    modes = {r["n"]: r for r in status.get("cuda_graphs", {}).get("lengths", [])}
    for n, limit in ((10**5, 0.3), (10**6, 1.0)):
        if n in by_n:
            rows.append(
                [
                    f"AP loss fwd+bwd <= {limit} ms at {n:.0e}",
                    format_ms(by_n[n]["ap_ms"]) + " eager",
                    by_n[n]["ap_ms"] <= limit,
                ]
            )
        if n in modes:
            best = min(modes[n]["compiled_ms"], modes[n]["graph_ms"])
            rows.append(
                [f"AP loss fwd+bwd <= {limit} ms at {n:.0e}, compiled or CUDA graph", format_ms(best), best <= limit]
            )
    if 10**8 in by_n and by_n[10**8]["peak_gib"] is not None:
        rows.append(
            ["peak memory <= 4.6 GiB at 1e8", format_gib(by_n[10**8]["peak_gib"]), by_n[10**8]["peak_gib"] <= 4.6]
        )
    detection = status.get("detection_step", {})
    if detection.get("runs"):
        rows.append(
            [
                "detection RoI loss <= 1 ms",
                format_ms(detection["classifier_loss"]["ms"]),
                detection["classifier_loss"]["ms"] <= 1.0,
            ]
        )
        rambo, ce = (r["seconds_per_step"] for r in detection["runs"])
        rows.append(["RaMBO detection step within 5% of CE", f"{rambo / ce:.3f} x CE", rambo <= 1.05 * ce])
    return rows
