"""How fast the CLI answers what needs no simulator: `simreal --help`, `tasks`, `robots`.

Each command runs in a fresh interpreter, warm (after one unmeasured run, so the OS caches
the files), several times; the figure is the median wall time beside a bare `python -c pass`
measured in the same run (the ratio travels between machines better than seconds). It also
checks that none of them imported torch or mujoco, and lists the slowest imports of each
(`python -X importtime`).

    python bench/cli_startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from _common import write_result

COMMANDS = {"--help": ["--help"], "tasks": ["tasks"], "robots": ["robots"]}
# run main() and report which heavy modules got imported (stdout is the command's own)
PROBE = ("import sys; from simreal.cli import main\n"
         "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "print('HEAVY', [m for m in ('torch', 'mujoco', 'warp') if m in sys.modules], "
         "file=sys.stderr)")


def wall(argv: list[str], repeats: int) -> float:
    subprocess.run(argv, capture_output=True, check=False)  # warm the file cache
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def slowest_imports(args: list[str], n: int = 5) -> list[tuple[str, float]]:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", PROBE, *args],
                          capture_output=True, text=True, check=False)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = (part.strip() for part in line[12:].split("|"))
            if cumulative.isdigit():
                rows.append((name.strip(), int(cumulative) / 1e6))
    top = [r for r in rows if "." not in r[0]]  # top-level packages: what is worth cutting
    return sorted(top, key=lambda r: -r[1])[:n]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    baseline = wall([sys.executable, "-c", "pass"], args.repeats)
    result = {"python_startup_s": round(baseline, 4), "commands": {}}
    print(f"python -c pass: {baseline * 1e3:.0f} ms (baseline)")
    for name, argv in COMMANDS.items():
        t = wall([sys.executable, "-m", "simreal.cli", *argv], args.repeats)
        heavy = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True,
                               text=True, check=False).stderr.strip().splitlines()[-1]
        imports = slowest_imports(argv)
        result["commands"][name] = {"median_s": round(t, 4), "ratio_to_python": round(
            t / baseline, 2), "heavy_modules": heavy, "slowest_imports_s": imports}
        print(f"simreal {name:7s} {t * 1e3:6.0f} ms  ({t / baseline:.1f}x python)  {heavy}  "
              f"slowest: {', '.join(f'{m} {s * 1e3:.0f} ms' for m, s in imports[:3])}")
    print(f"wrote {write_result('cli_startup', result)}")


if __name__ == "__main__":
    main()
