#!/usr/bin/env python3
"""The table and SVG of bench/memory-mode-sweep, from the guest's output.

Usage: memory_mode_sweep.py OUT DRAM_MB CXL_MB FACTORS WORKLOADS SYSTEMS
Reads OUT/guest.out (blocks `@@begin NAME` ... `@@end NAME`), prints a Markdown table and writes
OUT/sweep.svg: slowdown against the all-DRAM run at the same footprint, per workload and system.
"""
import json
import math
import os
import re
import sys

COLORS = {"kernel": "#d62728", "tierd": "#1f77b4", "tierd-cgroup": "#2ca02c", "tierd-zswap": "#9467bd"}
RATE = {"chase": ("steps_per_second", "ns/step"), "stream": ("bytes_per_second", "MB/s")}


def blocks(path):
    out, name, buf = {}, None, []
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"@@begin (\S+)", line)
        if m:
            name, buf = m.group(1), []
        elif line.startswith("@@end ") and name:
            out[name] = "\n".join(buf).strip()
            name = None
        elif name:
            buf.append(line)
    return out


def parse(text):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def rate(run, workload):
    if not run:
        return None
    r = run.get(RATE[workload][0])
    return r if r and r > 0 else None


def shown(run, workload):
    """The dram run's rate in the unit people read: ns per step, MB/s."""
    r = rate(run, workload)
    if r is None:
        return "n/a"
    return f"{1e9 / r:.0f}" if workload == "chase" else f"{r / 1e6:.0f}"


def tiers(last):
    m = (parse(last) or {}).get("memory") or {}
    b = m.get("bytes") or {}
    if not b:
        return ""
    out = " ".join(f"{k} {v / 2**20:.0f}M" for k, v in b.items())
    z = m.get("zswap") or {}
    if z.get("stored_bytes") is not None:
        out += f" (zswap {z['stored_bytes'] / 2**20:.0f}M in {z['pool_bytes'] / 2**20:.0f}M)"
    ra = m.get("swap_readahead") or {}
    if ra.get("page_cluster") is not None:
        out += f", readahead {2 ** ra['page_cluster']} pages"
    return out


def resident_mib(b, system, workload, mib):
    """The workload's mean VmRSS over its measured period, MiB."""
    kb = [int(x) for x in b.get(f"{system}-{workload}-{mib}-rss", "").split() if x.isdigit()]
    return sum(kb) / len(kb) / 1024 if kb else None


def svg(path, title, dram_mb, factors, workloads, systems, slow, fit_until):
    pw, ph = 460, 340
    ml, mt, mb, mr = 60, 40, 46, 16
    width, height = pw * len(workloads), ph + 50
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
    ]
    vals = [v for v in slow.values() if v and math.isfinite(v)]
    y1 = max(1, math.ceil(math.log10(max(vals)))) if vals else 1
    x0, x1 = 0.0, max(factors) * 1.05
    for k, w in enumerate(workloads):
        fit = fit_until.get(w, 0.0)
        left, right = k * pw + ml, (k + 1) * pw - mr
        top, bottom = mt, ph - mb

        def px(f):
            return left + (f - x0) / (x1 - x0) * (right - left)

        def py(v):
            return bottom - math.log10(max(v, 1.0)) / y1 * (bottom - top)

        out.append(f'<text x="{(left + right) / 2}" y="{top - 8}" text-anchor="middle" font-size="13">{w}</text>')
        out.append(
            f'<rect x="{px(0):.1f}" y="{top}" width="{px(fit) - px(0):.1f}" height="{bottom - top}" fill="#eef6ee"/>'
        )
        out.append(
            f'<text x="{px(fit) - 4:.1f}" y="{top + 12}" text-anchor="end" fill="#484">fits DRAM + CXL</text>'
        )
        out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#888"/>')
        for e in range(0, y1 + 1):
            for m in (1, 2, 5):
                v = m * 10**e
                if v > 10**y1:
                    break
                y = py(v)
                out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>')
                out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{v:g}x</text>')
        for f in factors:
            x = px(f)
            out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{f:g}</text>')
        y = py(1.2)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#484" stroke-dasharray="3 3"/>'
        )
        for s in systems:
            if s == "dram":
                continue
            pts = [(px(f), py(slow[(w, f, s)])) for f in factors if slow.get((w, f, s))]
            color = COLORS.get(s, "#555")
            if len(pts) > 1:
                d = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
                out.append(f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="2"/>')
            for x, y in pts:
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
        out.append(
            f'<text x="{(left + right) / 2}" y="{bottom + 32}" text-anchor="middle">'
            f"footprint / DRAM budget ({dram_mb} MiB)</text>"
        )
    lx = 20
    for s in systems:
        if s == "dram":
            continue
        color = COLORS.get(s, "#555")
        out.append(f'<line x1="{lx}" y1="{height - 10}" x2="{lx + 24}" y2="{height - 10}" stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{lx + 30}" y="{height - 6}">{s}: slowdown vs all-DRAM (log)</text>')
        lx += 260
    out.append(f'<text x="{lx}" y="{height - 6}" fill="#484">dashed: 1.2x</text>')
    out.append("</svg>")
    with open(path + ".tmp", "w") as fh:
        fh.write("\n".join(out) + "\n")
    os.replace(path + ".tmp", path)


def main():
    out, dram, cxl, factors, workloads, systems = sys.argv[1:7]
    dram_mb, cxl_mb = int(dram), int(cxl)
    factors = [float(f) for f in factors.split()]
    workloads, systems = workloads.split(), systems.split()
    b = blocks(f"{out}/guest.out")
    others = [s for s in systems if s != "dram"]
    print(
        f"Footprint sweep in the lab guest (QEMU TCG: ratios only; the CXL node costs what DRAM costs "
        f"here), DRAM budget {dram_mb} MiB, CXL budget {cxl_mb} MiB, swap on /dev/vda\n"
    )
    head = ["workload", "footprint", "x DRAM", "fits D+C", "all-DRAM"]
    head += [f"{s} slowdown" for s in others]
    head += [f"{s} resident" for s in systems]
    if "kernel" in others:
        head += [f"{s} vs kernel" for s in others if s != "kernel"]
    head += ["tierd's tiers at the end (each tierd column)", "intact"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    slow, fit_until = {}, {}
    for w in workloads:
        for f in factors:
            mib = int(dram_mb * f)
            runs = {s: parse(b.get(f"{s}-{w}-{mib}")) for s in systems}
            base = rate(runs.get("dram"), w)
            # Whether the workload fits the two budgets is judged by what it held resident alone
            # (its footprint plus the program's own pages), not by its footprint.
            alone = resident_mib(b, "dram", w, mib)
            fits = "n/a" if alone is None else ("yes" if alone <= dram_mb + cxl_mb else "no")
            cells = [w, f"{mib} MiB", f"{f:g}", fits]
            if fits == "yes":
                fit_until[w] = max(fit_until.get(w, 0.0), f)
            unit = RATE[w][1]
            cells.append(f"{shown(runs.get('dram'), w)} {unit}")
            for s in others:
                r = rate(runs[s], w)
                slow[(w, f, s)] = base / r if base and r else None
                cells.append(f"{slow[(w, f, s)]:.2f}x" if slow[(w, f, s)] else "n/a")
            for s in systems:
                r = resident_mib(b, s, w, mib)
                cells.append("n/a" if r is None else f"{r:.0f} MiB")
            if "kernel" in others:
                for s in others:
                    if s == "kernel":
                        continue
                    a, k = slow.get((w, f, s)), slow.get((w, f, "kernel"))
                    cells.append(f"{k / a:.2f}" if a and k else "n/a")
            last = [b.get(f"{s}-{w}-{mib}-tierd-last") for s in others if s.startswith("tierd")]
            cells.append("; ".join(t for t in map(tiers, last) if t))
            bad = [s for s in systems if runs[s] and runs[s].get("intact") is False]
            missing = [s for s in systems if not runs[s]]
            cells.append(
                ("NOT " + ",".join(bad) if bad else "yes") + (f" (no run: {','.join(missing)})" if missing else "")
            )
            print("| " + " | ".join(cells) + " |")
    print(
        "\nslowdown = the all-DRAM run's rate / the run's rate at the same footprint; "
        "`vs kernel` = the kernel's slowdown / tierd's (above 1: tierd is faster); "
        "resident = the workload's mean VmRSS over the measured period (once a second); `fits D+C` = "
        "the all-DRAM run's resident memory is within the two budgets."
    )
    svg(
        f"{out}/sweep.svg",
        f"Footprint sweep in the lab (TCG ratios): D={dram_mb} MiB, C={cxl_mb} MiB, swap on /dev/vda",
        dram_mb,
        factors,
        workloads,
        systems,
        slow,
        fit_until,
    )


if __name__ == "__main__":
    main()
