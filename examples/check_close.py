#!/usr/bin/env python3
"""check_close.py ACTUAL EXPECTED...: the files hold whitespace-separated numbers; fails
unless ACTUAL's agree pairwise within 1e-4 (absolute) with those of the EXPECTED files
read one after another (several when a program prints several models' outputs) — used
by the examples' run targets and tests."""
import sys
a = [float(v) for v in open(sys.argv[1]).read().split()]
e = [float(v) for path in sys.argv[2:] for v in open(path).read().split()]
if len(a) != len(e) or any(abs(x - y) > 1e-4 for x, y in zip(a, e)):
    sys.exit(f"mismatch: got {a}, expected {e}")
print(f"{sys.argv[1]} matches {' + '.join(sys.argv[2:])}")
