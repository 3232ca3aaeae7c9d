"""The cost law's figure, from a `cost_law` document: the τ sweep, the indep sweep and, when it
was measured, the forget across processes."""

from __future__ import annotations


def _lines(ax, xs, series) -> None:
    """Plot (label, ys, style) series; one equal to an earlier one is named on its line
    ("B5 = B5'") instead of drawn over it, so no line hides another."""
    drawn: list[tuple[list, list, str]] = []  # (ys, labels, style)
    for label, ys, style in series:
        same = next((d for d in drawn if d[0] == ys), None)
        if same is not None:
            same[1].append(label)
        else:
            drawn.append((ys, [label], style))
    for ys, labels, style in drawn:
        ax.plot(xs, ys, style, label=" = ".join(labels), color=COLORS.get(labels[0]))


COLORS = {"B5": "C0", "B5'": "C1", "B7": "C2", "B7-decode": "C3", "B7-oracle": "C4"}  # one per method, every panel


def _legend(ax) -> None:
    """The legend in a band above the data (the y axis extended to make room), so it hides no line."""
    bottom, top = ax.get_ylim()
    ax.set_ylim(bottom, bottom + (top - bottom) * 1.45)
    ax.legend(loc="upper left", ncol=2, fontsize=8, framealpha=0.9)


def plot(doc: dict, path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cross = doc.get("cross_process")
    panels = 2 + bool(cross) - (not doc["tau_sweep"])
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4))
    # ax[0] τ sweep (absent without one), ax[1] indep sweep, ax[2] across processes
    ax = ([None] if not doc["tau_sweep"] else []) + list(axes)
    agent = doc.get("shape", "short") == "agent"
    sweep = sorted(doc["tau_sweep"], key=lambda r: r["suffix"] if agent else r["tau"])
    xs = [r["suffix"] if agent else r["tau"] for r in sweep]
    if sweep:
        _lines(ax[0], xs, [(m, [r[m]["recomputed"] for r in sweep], style)
                           for m, style in (("B5", "s-"), ("B5'", "^-"), ("B7", "o-"), ("B7-decode", "x--"))
                           if m in sweep[0]])
    if not sweep:
        pass
    elif agent:
        f = doc["fit"]
        ax[0].plot([0, max(xs)], [f["intercept"], f["intercept"] + f["slope"] * max(xs)], ":", color="grey",
                   label=f"B7 fit {f['slope']:.1f}·(T−τ+1){f['intercept']:+.0f}")
        ax[0].set_xlabel("suffix T−τ+1 (turns from the target to the end)")
    else:
        ax[0].set_xlabel("injection step τ")
    if sweep:
        ax[0].set_ylabel("tokens computed (every forward)")
        a1 = doc.get("fit_algorithm1")
        ax[0].set_title(f"cost vs τ ({doc.get('shape', 'short')}, T={doc['T']}, {doc['model']}); "
                        f"B7 fit R²={doc['fit']['r2']:.4f}" + (f", B7-decode R²={a1['r2']:.4f}" if a1 else ""),
                        fontsize=9)
        _legend(ax[0])
    ind = [r["indep"] for r in doc["indep_sweep"]]
    methods = [m for m in ("B5", "B5'", "B7", "B7-oracle") if m in doc["indep_sweep"][0]]
    if len(ind) == 1:  # one indep measured: a bar per method, not a line of one point
        row = doc["indep_sweep"][0]
        ax[1].bar(range(len(methods)), [row[m]["tokens_decoded"] for m in methods],
                  color=[COLORS[m] for m in methods], label=[f"{m}: {row[m]['tokens_decoded']}" for m in methods])
        ax[1].set_xticks(range(len(methods)), methods)
        ax[1].set_xlabel(f"method (indep {ind[0]:g}: the fraction of post-τ turns independent of z)")
    else:
        _lines(ax[1], ind, [(m, [r[m]["tokens_decoded"] for r in doc["indep_sweep"]], style)
                            for m, style in (("B5", "s-"), ("B5'", "^-"), ("B7", "o-"), ("B7-oracle", "d--"))
                            if m in methods])
        ax[1].set_xlabel("indep (fraction of post-τ turns independent of z)")
    ax[1].set_ylabel("tokens decoded")
    ax[1].set_title(f"decode cost vs indep (T={doc['paper_shape']['T']}, τ={doc['paper_shape']['tau']})", fontsize=9)
    _legend(ax[1])
    if cross:
        import numpy as np

        x = np.arange(len(cross))
        w = 0.14
        bars = [(m, key, f"{m} {what}") for key, what in (("seconds", "forget"), ("process_seconds", "process"))
                for m in ("B5", "B5'", "B7")]
        for i, (m, key, label) in enumerate(bars):  # a method's colour; its whole process hatched
            ax[2].bar(x + (i - 2.5) * w, [r[m][key] for r in cross], w, label=label, color=COLORS[m],
                      hatch="//" if key == "process_seconds" else None, edgecolor="white")
        ax[2].set_xticks(x, [str(r["indep"]) for r in cross])
        ax[2].set_xlabel("indep")
        ax[2].set_ylabel("seconds")
        r0 = cross[0]
        restored = r0["B7"].get("tokens_restored")
        ax[2].set_title(f"fresh process, suffix {r0['suffix']}: B7 re-materializes "
                        f"{r0['B7']['tokens_rematerialized']} tokens"
                        + ("" if restored is None else f", restores {restored}"), fontsize=9)
        _legend(ax[2])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]
