"""Draw bench/peers.py's figures: python chart.py results.json out.png (peers venv: matplotlib)."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dest):
    d = json.load(open(src))
    systems = [(k, v) for k, v in (d.get("systems") or {}).items() if "error" not in v]
    curves = d.get("curves") or {}
    fig, axes = plt.subplots(2, 5, figsize=(25, 9))
    fig.suptitle(f"queueadmin benchmark — {d['meta']['machine']}, Redis {d['meta']['redis']}"
                 f"{' (quick run)' if d['meta'].get('quick') else ''}", fontsize=12)
    labels = [v["label"] for _, v in systems]
    colors = ["#d62728" if k == "qa" else "#7f7f7f" for k, _ in systems]

    def bars(ax, key, title, unit, scale=1.0, log=False):
        vals = [(v.get(key) or 0) * scale for _, v in systems]
        ax.bar(labels, vals, color=colors)
        ax.set_title(title)
        ax.set_ylabel(unit)
        if log:
            ax.set_yscale("log")
        ax.tick_params(axis="x", rotation=45)
        for i, v in enumerate(vals):
            if v:
                ax.annotate(f"{v:,.0f}" if v >= 10 else f"{v:.2g}", (i, v), ha="center", va="bottom", fontsize=7)

    bars(axes[0][0], "drain", "drain, 2 worker processes\n(no-op job)", "jobs/s")
    bars(axes[0][1], "enqueue", "enqueue, single jobs,\none producer", "jobs/s")
    ax = axes[0][2]
    x = range(len(systems))
    ax.bar([i - 0.2 for i in x], [(v.get("p50") or 0) * 1000 for _, v in systems], 0.4, label="p50", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], [(v.get("p99") or 0) * 1000 for _, v in systems], 0.4, label="p99", color="#ff7f0e")
    ax.set_xticks(list(x), labels, rotation=45)
    ax.set_yscale("log")
    ax.set_title(f"enqueue → start latency\nat {d['meta']['rate']:.0f} jobs/s, idle workers")
    ax.set_ylabel("ms (log)")
    ax.legend()
    ax = axes[0][4]
    w = [(v.get("cpu_worker") or 0) for _, v in systems]
    r = [(v.get("cpu_redis") or 0) for _, v in systems]
    ax.bar(labels, w, color=colors, label="worker processes")
    ax.bar(labels, r, bottom=w, color="#1f77b4", label="redis-server")
    for i, (a, b) in enumerate(zip(w, r)):
        if a + b:
            ax.annotate(f"{a + b:,.0f}", (i, a + b), ha="center", va="bottom", fontsize=7)
    ax.set_title("CPU time per job drained\n(workers + redis-server; lower is better)")
    ax.set_ylabel("µs per job (log)")
    ax.set_yscale("log")
    ax.set_ylim(bottom=10)
    ax.tick_params(axis="x", rotation=45)
    ax.legend(fontsize=8)
    bars(axes[0][3], "mem", "Redis memory per queued job\n(queueadmin: one-item requests)", "bytes", log=True)

    def curve(ax, kind, title, xlabel, logx=True):
        pts = curves.get(kind) or []
        if not pts:
            ax.set_visible(False)
            return
        xs = [p["x"] for p in pts]
        ys = [p["rate"] or 0 for p in pts]
        ax.plot(xs, ys, "o-", color="#d62728")
        for xv, yv in zip(xs, ys):
            ax.annotate(f"{yv:,.0f}", (xv, yv), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=7)
        if logx:
            ax.set_xscale("log")
        ax.set_ylim(0, max(ys) * 1.25 if ys and max(ys) else 1)
        cpu = [(p.get("worker_us") or 0) + (p.get("redis_us") or 0) for p in pts]
        if any(cpu):
            ax2 = ax.twinx()
            ax2.plot(xs, cpu, "s--", color="#1f77b4", alpha=0.8)
            ax2.set_ylim(0, max(cpu) * 1.6)
            ax2.set_ylabel("CPU µs/item (dashed)", color="#1f77b4")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("items/s")
        ax.grid(alpha=0.3)

    T = curves.get("T", 0)
    curve(axes[1][0], "requests", f"queueadmin: N requests queued\n(rate over the first {T:,} items)", "requests queued")
    curve(axes[1][1], "levels", f"queueadmin: 100 requests over\nN priority levels ({T:,} items)", "priority levels")
    curve(axes[1][2], "sizes", f"queueadmin: items per request\n({T:,} items drained)", "items per request")
    curve(axes[1][3], "processes", "queueadmin: worker processes\n(one request, 2 cores)", "worker processes", logx=False)
    axes[1][4].axis("off")
    axes[1][4].text(0, 0.5, "Top: every system runs the same no-op job\non the same Redis, medians of the runs.\n"
                    "queueadmin red; its memory bar is per\none-item request.\n\nBottom: queueadmin's drain rate (solid,\n"
                    "left axis) and CPU time per item of the\nworkers + redis-server (dashed, right axis):\n"
                    "flat lines mean a flat cost per item.", fontsize=10, va="center")
    fig.tight_layout()
    fig.savefig(dest, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
