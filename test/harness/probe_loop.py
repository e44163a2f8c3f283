# A continuous probe for restart tests: reads one JSON object on the first
# stdin line, {"probes": [probes as probe.py takes them], "pauseMs": 20},
# then runs the probes round after round, pauseMs between rounds, until
# stdin closes. Prints "ready"
# after the first round, and at the end one JSON object:
#   {"rounds": N, "connections": N, "failed": N,
#    "failures": [{"i": probe index, "t": seconds since start, "error": ...}],
#    "timeline": [[[epoch ms, verdict], ...] per probe: each change of verdict]}
# (at most 50 failures listed; "failed" counts them all). A verdict is who
# answered (or the HTTP status), else the error.
import json
import sys
import threading
import time

from probe import probe

spec = json.loads(sys.stdin.readline())
probes, pause = spec["probes"], spec.get("pauseMs", 20) / 1000
stop = threading.Event()


def wait_eof():
    sys.stdin.read()
    stop.set()


threading.Thread(target=wait_eof, daemon=True).start()

start = time.monotonic()
rounds = connections = failed = 0
failures = []
timeline = [[] for _ in probes]
while True:
    for i, p in enumerate(probes):
        r = probe(p)
        verdict = r["who"] if r["ok"] else r["error"]
        if not timeline[i] or timeline[i][-1][1] != verdict:
            timeline[i].append([round(time.time() * 1000, 1), verdict])
        connections += 1
        if not r["ok"]:
            failed += 1
            if len(failures) < 50:
                failures.append({"i": i, "t": round(time.monotonic() - start, 3), "error": r["error"], "detail": r.get("detail", "")})
    rounds += 1
    if rounds == 1:
        print("ready", flush=True)
    # stop is checked after a whole round: every target is probed equally often
    if stop.wait(pause):
        break
print(json.dumps({"rounds": rounds, "connections": connections, "failed": failed, "failures": failures, "timeline": timeline}), flush=True)
