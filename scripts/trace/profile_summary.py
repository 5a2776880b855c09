"""Where the workers' time went: reads the .prof files GPUIPC_BENCH_PROFILE=DIR wrote and prints,
per scenario and rank, the total and the functions with the most time of their own and in all.
Usage: python scripts/trace/profile_summary.py DIR [TOP]"""

import collections
import pstats
import sys
from pathlib import Path

folder, top = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 18
groups = collections.defaultdict(list)
for path in sorted(folder.glob("*.prof")):
    scenario, rank = path.stem.split("-")[:2]
    groups[(scenario, rank)].append(str(path))
for (scenario, rank), files in sorted(groups.items()):
    stats = pstats.Stats(*files)
    print(f"\n===== {scenario} rank {rank}: {stats.total_tt:.2f} s in {len(files)} file(s)")
    rows = [(tt, ct, n, f"{Path(fn).name}:{line}({name})") for (fn, line, name), (_, n, tt, ct, _) in
            stats.stats.items()]
    print("  own time:")
    for tt, ct, n, where in sorted(rows, reverse=True)[:top]:
        print(f"    {tt:7.3f} s own {ct:7.3f} s all {n:8d} calls  {where}")
    print("  all time (scenario code):")
    for ct, tt, n, where in sorted(((ct, tt, n, w) for tt, ct, n, w in rows if "gpuipc_bench" in w or "scenarios" in w
                                    or ".py:" in w), reverse=True)[:top]:
        print(f"    {ct:7.3f} s all {tt:7.3f} s own {n:8d} calls  {where}")
