"""Plots and the median the benchmark reports share (``report`` and ``report_mor`` both draw)."""
from __future__ import annotations

from pathlib import Path


def median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else float("nan")


def _plt():
    """matplotlib with a file-only backend, or None when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rolling_median(y: list[float], k: int) -> list[float]:
    return [median(y[max(0, i - k + 1):i + 1]) for i in range(len(y))]


def plot(plots_dir: Path, name: str, series: dict[str, tuple[list, list]], xlabel: str, ylabel: str,
         log: bool = False, smooth: int = 0) -> list[str]:
    """One line per series (dashed after the first, so equal series stay visible); with
    ``smooth``, the raw points faint and a rolling median of ``smooth`` points over them."""
    plt = _plt()
    if plt is None:
        return []
    plt.figure(figsize=(7, 3.2))
    for i, (label, (x, y)) in enumerate(series.items()):
        style = ("-", "--", ":")[i % 3]
        if smooth:
            line, = plt.plot(x, y, linewidth=0.5, alpha=0.3)
            plt.plot(x, _rolling_median(y, smooth), label=f"{label} (rolling median of {smooth})",
                     color=line.get_color(), linewidth=1.4, linestyle=style)
        else:
            plt.plot(x, y, label=label, linewidth=1.0, linestyle=style)
    if log:
        plt.yscale("log")
    plt.xlabel(xlabel)
    plt.ylabel(ylabel)
    plt.legend()
    plt.tight_layout()
    plt.savefig(plots_dir / name)
    plt.close()
    return [f"![{ylabel}](results/{name})", ""]
