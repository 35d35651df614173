"""Helpers the plot scripts share: how a point that could not run is drawn, and a figure
legend gathered from every panel."""
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
from matplotlib.transforms import blended_transform_factory

OOM_LABEL = "out of memory"


def mark_out_of_memory(ax, xs, color):
    """An x just above the panel's floor at each batch a mode could not run: a marker, not a value."""
    if not xs:
        return
    floor = blended_transform_factory(ax.transData, ax.transAxes)
    ax.plot(xs, [0.04] * len(xs), "x", color=color, ms=8, mew=2, transform=floor, clip_on=False)


def oom_handle():
    return Line2D([], [], ls="none", marker="x", color="black", ms=8, mew=2, label=OOM_LABEL)


def figure_legend_entries(axes, with_oom, order=None):
    """Every labelled line of every panel, once (plus the OOM marker last), sorted by
    order[label] when given, else in first-seen order."""
    seen = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("_"):
                seen.setdefault(label, handle)
    if order:
        seen = dict(sorted(seen.items(), key=lambda item: order.get(item[0], ())))
    if with_oom:
        seen[OOM_LABEL] = oom_handle()
    return list(seen.values()), list(seen.keys())


def plain_log_ticks(ax):
    """Log axis ticks at 1-2-5 steps, read as plain numbers rather than powers."""
    ax.yaxis.set_major_locator(FixedLocator([m * 10.0 ** e for e in range(-2, 4) for m in (1, 2, 5)]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
