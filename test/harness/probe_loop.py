# A continuous probe for restart tests: reads one JSON array of probes (as
# probe.py takes them) on the first stdin line, then runs them round after
# round, a short pause between rounds, until stdin closes. Prints "ready"
# after the first round, and at the end one JSON object:
#   {"rounds": N, "connections": N, "failed": N,
#    "failures": [{"i": probe index, "t": seconds since start, "error": ...}]}
# (at most 50 failures listed; "failed" counts them all).
import json
import sys
import threading
import time

from probe import probe

probes = json.loads(sys.stdin.readline())
stop = threading.Event()


def wait_eof():
    sys.stdin.read()
    stop.set()


threading.Thread(target=wait_eof, daemon=True).start()

start = time.monotonic()
rounds = connections = failed = 0
failures = []
while True:
    for i, p in enumerate(probes):
        r = probe(p)
        connections += 1
        if not r["ok"]:
            failed += 1
            if len(failures) < 50:
                failures.append({"i": i, "t": round(time.monotonic() - start, 3), "error": r["error"], "detail": r.get("detail", "")})
    rounds += 1
    if rounds == 1:
        print("ready", flush=True)
    # stop is checked after a whole round: every target is probed equally often
    if stop.wait(0.02):
        break
print(json.dumps({"rounds": rounds, "connections": connections, "failed": failed, "failures": failures}), flush=True)
