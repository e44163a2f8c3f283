// A bound on how long the product may take, for a test that asserts a
// latency kpng promises (a failover within 2 s, say): the promise holds on a
// machine with a core to spare, and on a loaded one everything, kpng's timers
// and the test's own clock, runs that many times slower. So the bound is the
// promise stretched by the run queue per core over the last minute, never
// below the promise itself: an idle machine checks the promise as written,
// a loaded one (CI beside a bench, 2 cores at load 40) does not fail the
// product for the machine.

import { availableParallelism, loadavg } from "node:os";

/** `idleMs` stretched by the load per core (at least 1) */
export function loadedBound(idleMs: number): number {
  return idleMs * Math.max(1, loadavg()[0] / availableParallelism());
}
