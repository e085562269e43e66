#!/usr/bin/env python3
"""Summarise an ncu source page (`ncu --import R --page source --csv --print-source sass`, from
a report taken with the SourceCounters and WarpStateStats sections): the warp-stall samples by
reason, the shared-memory wavefronts and their excess (bank conflicts), the executed
instructions by opcode beside their share of the samples, and the SASS lines with the most
samples (each with its two largest reasons and its excess wavefronts).

usage: scripts/ncu_lines.py SOURCE.csv [TOP]      (TOP lines, default 30)
"""
import collections
import csv
import sys


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    rows = list(csv.reader(open(path, newline="")))
    # Row 0 names the kernel; row 1 is the header.
    head = rows[1]
    data = [r for r in rows[2:] if len(r) == len(head)]
    ix = {c: i for i, c in enumerate(head)}
    need = ["Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]
    missing = [c for c in need if c not in ix]
    if missing:
        sys.exit(f"{path}: no column {missing}: take the report with --section SourceCounters "
                 "--section WarpStateStats")

    def num(r, c):
        v = r[ix[c]] if c in ix else ""
        try:
            return float(v)
        except ValueError:
            return 0.0

    samples = "Warp Stall Sampling (All Samples)"
    total = sum(num(r, samples) for r in data) or 1.0
    reasons = [c for c in head if c.startswith("stall_") and "Not Issued" not in c]
    by_reason = {c: sum(num(r, c) for r in data) for c in reasons}
    print(f"{rows[0][1] if len(rows[0]) > 1 else path}")
    print(f"samples {total:.0f}; by reason: " + ", ".join(
        f"{c[6:]} {100 * v / total:.1f}%" for c, v in sorted(by_reason.items(), key=lambda x: -x[1])[:9]))
    wf = sum(num(r, "L1 Wavefronts Shared") for r in data)
    ex = sum(num(r, "L1 Wavefronts Shared Excessive") for r in data)
    if wf:
        print(f"shared wavefronts {wf:.3g}, excess {ex:.3g} ({100 * ex / wf:.0f}%)")
    execd = collections.Counter()
    samp = collections.Counter()
    for r in data:
        words = r[ix["Source"]].split()
        if not words:
            continue
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        op = op.split(".")[0]
        execd[op] += num(r, "Instructions Executed")
        samp[op] += num(r, samples)
    n = sum(execd.values()) or 1.0
    print(f"warp instructions executed {n:.4g}; by opcode (share of instructions, of samples):")
    for op, v in execd.most_common(16):
        print(f"  {op:<10} {100 * v / n:5.1f}%  {100 * samp[op] / total:5.1f}%")
    print(f"the {top} lines with the most samples (line of the source page, share, reasons):")
    order = sorted(range(len(data)), key=lambda i: -num(data[i], samples))[:top]
    for i in order:
        r = data[i]
        rs = sorted(((num(r, c), c[6:]) for c in reasons), reverse=True)[:2]
        exc = num(r, "L1 Wavefronts Shared Excessive")
        print(f"  {i:5d} {100 * num(r, samples) / total:5.1f}%  {r[ix['Source']].strip()[:60]:<60} "
              + ", ".join(f"{c} {100 * v / total:.1f}" for v, c in rs if v)
              + (f"  excess wavefronts {exc:.3g}" if exc else ""))


if __name__ == "__main__":
    main()
