import re, sys
label = sys.argv[1]
t = sys.stdin.read()
if "SLO attainment" not in t:
    print(label, "FAILED:", t[-800:]); sys.exit()
g = lambda p: (re.search(p, t) or [None, '?'])[1]
print(label, 'client', g(r"\(the client's count: ([0-9.]+)\)"), 'infer', g(r"action statuses: \{'OK': (\d+)"),
      'TOO_LATE', g(r"'TOO_LATE': (\d+)"), 'ctl', g(r'controller CPU (\d+)'), 'cli', g(r'client (\d+) µs'),
      'wrk', g(r'workers (\d+) µs'), 'lat', g(r'lateness p99 ([0-9.]+)'), '|', g(r'(refused \d+, late only on the way back \d+)'))
