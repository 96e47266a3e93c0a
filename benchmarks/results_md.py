"""``benchmarks/RESULTS.md``: the latest figure of every section, one block each.

The file is a head (kept as written), the goals table, and one block per section between
markers::

    <!-- section: long_run -->
    ## Long run (...)
    ...
    <!-- /section: long_run -->

A run replaces the blocks of the sections it ran, and those sections' rows of the goals table,
and leaves every other block and row as it is; a section seen for the first time is inserted in
the order of ``WORKLOADS``. So the file holds one current figure per section and never
accumulates runs: earlier figures are in git history. Each block opens with when and on what
machine its figures were taken (and the run's ``--note``, e.g. a busy machine).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

GOALS_BEGIN = "<!-- goals -->"
GOALS_END = "<!-- /goals -->"
GOALS_HEADER = ["| goal | measured | target | met | section | taken (UTC) |",
                "| --- | ---: | ---: | :---: | --- | --- |"]
_BLOCK = re.compile(r"<!-- section: (?P<name>\w+) -->\n(?P<body>.*?)<!-- /section: (?P=name) -->\n?", re.S)

HEAD = """# Benchmark results

The latest figure of every section of `python -m benchmarks.run` (`make bench`), one block per
section; earlier runs are in git history. Each block says when and on what machine its figures
were taken: ratios taken in one run are what to compare, absolute times drift on shared machines.
`make bench ONLY=long_run` reruns one section and replaces its block and its goal rows only;
`python -m benchmarks.run --list` names the sections. Raw timings: `results/<time>.json`.
"""


def block(name: str, body: str) -> str:
    """One section's block, markers included."""
    return f"<!-- section: {name} -->\n{body.strip()}\n<!-- /section: {name} -->\n"


def parse(text: str) -> tuple[str, list[str], dict[str, str]]:
    """(head, goal rows, blocks by section name) of a RESULTS.md; a file without the goals
    markers has no rows, and everything before its first block is its head."""
    first = _BLOCK.search(text)
    top = text[:first.start()] if first else text
    rows: list[str] = []
    if GOALS_BEGIN in top and GOALS_END in top:
        before, _, rest = top.partition(GOALS_BEGIN)
        table, _, _ = rest.partition(GOALS_END)
        rows = [ln for ln in table.splitlines() if ln.startswith("|") and ln not in GOALS_HEADER]
        top = before
    elif "## " in top:  # an older file: its head is its first lines
        top = top[:top.index("## ")]
    blocks = {m["name"]: block(m["name"], m["body"]) for m in _BLOCK.finditer(text)}
    return top.rstrip() + "\n", rows, blocks


def goal_of(row: str) -> str:
    return row.split("|")[1].strip()


def section_of(row: str) -> str:
    cells = row.split("|")
    return cells[5].strip().strip("`") if len(cells) > 6 else ""


def goal_row(goal: str, section: str, target: float, value: float | None, taken: str, replaced: bool) -> str:
    if value is None:
        return f"| {goal} | not measured | <= {target:.2f} | | `{section}` | |"
    met = "replaced" if replaced else "yes" if value <= target else "no"
    return f"| {goal} | {value:.2f} | <= {target:.2f} | {met} | `{section}` | {taken} |"


def merge_goal_rows(old: list[str], new: dict[str, str], goals: Iterable[tuple[str, str, float]],
                    ran: set[str]) -> list[str]:
    """The goals table after a run of the sections ``ran``: ``new`` rows (by goal) for their
    goals, the old row of every other goal, and old rows of goals the list does not name (notes
    added by hand) unless their section ran."""
    by_goal = {goal_of(r): r for r in old}
    out = []
    named = set()
    for goal, section, target in goals:
        named.add(goal)
        if section in ran:
            out.append(new.get(goal) or goal_row(goal, section, target, None, "", False))
        else:
            out.append(by_goal.get(goal) or goal_row(goal, section, target, None, "", False))
    out += [r for r in old if goal_of(r) not in named and section_of(r) not in ran]
    return out


def update(text: str | None, order: Iterable[str], blocks: dict[str, str], goal_rows: list[str]) -> str:
    """RESULTS.md with ``blocks`` (section -> body, markers added here) in place of the old ones
    and ``goal_rows`` as the goals table; other blocks kept, in ``order`` (unknown names last)."""
    head, _, old = parse(text) if text else (HEAD, [], {})
    merged = {**old, **{k: block(k, v) for k, v in blocks.items()}}
    order = list(order)
    names = [n for n in order if n in merged] + [n for n in merged if n not in order]
    out = [head, GOALS_BEGIN, "## Goals", "",
           "Goal numbers: issue.goal (15: performance, 16: table health, 17: Spark data source, 35: the event "
           "workload and the insert limit, 43: insert and read limits, 57: object storage cost, 59: the metadata "
           "table's indexes); MOR n: the Merge-on-Read goals, NBCC n: the "
           "non-blocking writer goals. Each row is its section's latest run (see the section's block for the "
           "machine and the sizes); systems interleaved batch by batch in one process, results checksummed.", "",
           *GOALS_HEADER, *goal_rows, GOALS_END, ""]
    return "\n".join(out) + "\n" + "\n".join(merged[n] for n in names)
