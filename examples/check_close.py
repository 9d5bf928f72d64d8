#!/usr/bin/env python3
"""check_close.py ACTUAL EXPECTED: both files hold whitespace-separated numbers; fails
unless every pair agrees within 1e-4 (absolute) — used by the examples' run targets."""
import sys
a = [float(v) for v in open(sys.argv[1]).read().split()]
e = [float(v) for v in open(sys.argv[2]).read().split()]
if len(a) != len(e) or any(abs(x - y) > 1e-4 for x, y in zip(a, e)):
    sys.exit(f"mismatch: got {a}, expected {e}")
print("output matches expected.txt")
