"""The placement line the bench-*.sh scripts print: fm-bench's FM-level
8 B one-way time of each round (`fm-bench pingpong --sizes 8 --csv` into
OUT/fmlevel.ROUND), which says where the two vCPUs sat (about 0.1 µs near,
0.2-0.3 µs far; docs/PERFORMANCE.md, "Machine and method")."""


def fm_level(path):
    """The 8 B one-way median in fm-bench's CSV at `path`, or NaN."""
    try:
        for line in open(path, errors="replace"):
            f = line.split(",")
            if len(f) > 6 and f[0] == "pingpong" and f[3] == "8":
                return float(f[6])
    except (FileNotFoundError, ValueError):
        pass
    return float("nan")


def placement_line(out, rounds):
    return "FM-level 8 B one-way (µs) per round, the placement: " + " ".join(
        f"{fm_level(f'{out}/fmlevel.{r}'):.3f}" for r in range(1, rounds + 1)
    )
