// An idle kpng sleeps: with its health and metrics servers up and nothing
// changing, its main thread wakes only for its own periodic work, not 100
// times a second. Counted as the main thread's voluntary context switches
// (/proc/PID/task/PID/status): each wake-up from the event loop's wait is one,
// whatever the machine's load, so the count does not depend on an idle host.

import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { FREE_PORTS, ROOT, startKpng, type KpngProcess } from "../harness/kpng-process.ts";

let kpng: KpngProcess | undefined;
afterAll(async () => {
  await kpng?.stop("SIGKILL");
});

const switches = (pid: number) =>
  Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/task/${pid}/status`, "utf8"))?.[1]);

test("an idle kpng with its servers up wakes at most a few times a second", async () => {
  kpng = startKpng(["--input", `${ROOT}/examples/cluster.yaml`, "--node-name", "node-1", "--backend", "nft", "--dry-run", ...FREE_PORTS]);
  await kpng.waitFor(/serving metrics/);
  await kpng.waitFor(/ INFO kpng: synced /);
  await Bun.sleep(2000); // start-up's own collections and releases are over
  const before = switches(kpng.proc.pid);
  await Bun.sleep(3000);
  const woke = switches(kpng.proc.pid) - before;
  console.log(`idle kpng: ${woke} wake-ups of its main thread in 3 s`);
  // 300 at prom-client's default 10 ms event-loop sampling; its own timers (the
  // file watch, the once-a-second sampling) stay far under this
  expect(woke).toBeLessThan(60);
}, 120_000);
