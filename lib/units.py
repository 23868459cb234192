"""Human-readable figures with their units (SI prefixes for counts, binary-free decimal bytes)."""
import math


def fmt_count(x: float) -> str:
    """1.23e9 -> '1.23 G' (append the unit: 'FLOP', 'MAC')."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a "
    for div, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g} {prefix}"
    return f"{x:.3g} "


def fmt_bytes(x: float) -> str:
    return f"{fmt_count(x)}B"


def fmt_binary_bytes(n, digits: int = 3) -> str:
    """1536 -> '1.5 KiB' (binary prefixes: memory sizes, tensors, files)."""
    for unit, k in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= k:
            return f"{n / k:.{digits}g} {unit}"
    return f"{int(n)} B"


def fmt_us(us: float) -> str:
    """A duration given in microseconds: 3.2 -> '3.2 us', 1234 -> '1.23 ms', 2.5e6 -> '2.5 s' (a tiny model's
    roofline sum read '0.00 ms' in milliseconds)."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "n/a"
    for div, unit in ((1e6, "s"), (1e3, "ms")):
        if abs(us) >= div:
            return f"{us / div:.3g} {unit}"
    return f"{us:.3g} us"
