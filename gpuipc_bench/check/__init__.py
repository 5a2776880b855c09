"""`gpuipc-bench check`: does this node, and every node of an allocation, move GPU data as it should?

    paths.py       which paths can work here and why not (facts gathered, then decided)
    node.py        one node's check: the paths, the short preset measured through run's session
                   (harness.session, a plan per scenario, each run independent), each figure judged
    figures.py     the headline figures taken from a run's rows
    expect.py      expectations per model, learned from healthy runs (--learn), read (--expect)
    judge.py       a figure against its expectation and its own ceiling, and its lane; nodes against the fleet
    conditions.py  what NVML says went on (a busy GPU, a throttled clock; each PCIe link under load)
    fleet.py       every node of an MPI job: point-to-point reports to rank 0, with a deadline
    output.py      JSON lines, JUnit XML, Prometheus text, the terminal table
    table.py       the fleet table (terminal, Markdown, JSON)
    heatmap.py     the fleet's heatmaps, one image per figure family, readable at a thousand nodes
Its test-only hooks (node names; planted slow, flutter, kill, hang, faults) are in
gpuipc_bench/hooks/plant.py. The command is gpuipc_bench/cli/check.py; the README's
"Checking a node and a fleet" says how expectations and tolerances work.
"""
