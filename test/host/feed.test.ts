// Feeding a backend: one apply at a time, revisions arriving meanwhile
// coalesce into one apply with the union of their change sets, and a failed
// apply is retried as a full sync, and so is a backend's report that
// someone else changed its rules.

import { describe, expect, test } from "bun:test";
import type { Revision } from "../../src/core/brain/brain.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { NodeState, StateChange } from "../../src/core/brain/state.ts";
import type { FullStateBackend } from "../../src/host/backend.ts";
import { feedBackend, repairPacer } from "../../src/host/feed.ts";

const state = (rev: number): NodeState => ({ nodeName: "n", rev, services: new Map() });
const rev = (n: number, change: string[] | null): Revision => ({ state: state(n), change: change && new Set(change) });

function recorder(opts: { failFirst?: boolean; delayMs?: number } = {}) {
  const applied: Array<{ rev: number; change: string[] | null }> = [];
  let failed = !opts.failFirst;
  const ear: { report?: (reason: string) => void } = {};
  const backend: FullStateBackend & { ear: typeof ear } = {
    kind: "full",
    name: "rec",
    ear,
    watchRules(report) {
      ear.report = report;
    },
    async apply(s: NodeState, change: StateChange) {
      await Bun.sleep(opts.delayMs ?? 0);
      if (!failed) {
        failed = true;
        throw new Error("nft: transaction failed");
      }
      applied.push({ rev: s.rev, change: change && [...change].sort() });
    },
  };
  return { backend, applied };
}

describe("feedBackend", () => {
  test("revisions arriving during an apply coalesce into one apply of the latest state", async () => {
    const { backend, applied } = recorder({ delayMs: 20 });
    const feed = feedBackend(backend, { log: memoryLogger() });
    feed.push(rev(1, null));
    feed.push(rev(2, ["a"]));
    feed.push(rev(3, ["b"]));
    await Bun.sleep(10);
    await feed.idle();
    expect(applied).toEqual([
      { rev: 1, change: null },
      { rev: 3, change: ["a", "b"] },
    ]);
  });

  test("a failed apply is retried as a full sync (change null)", async () => {
    const { backend, applied } = recorder({ failFirst: true });
    const log = memoryLogger();
    const feed = feedBackend(backend, { log, retryMs: 10 });
    feed.push(rev(1, null));
    await feed.idle();
    feed.push(rev(2, ["a"]));
    await Bun.sleep(30);
    await feed.idle();
    expect(applied).toEqual([{ rev: 2, change: null }]);
    expect(log.lines.some((l) => l.includes("sync failed") && l.includes("nft: transaction failed"))).toBe(true);
  });

  test("rules lost: reported, then one full sync of the latest state; nothing before the first revision", async () => {
    const { backend, applied } = recorder();
    const reasons: string[] = [];
    const log = memoryLogger();
    const feed = feedBackend(backend, { log, onRulesLost: (r) => reasons.push(r) });
    backend.ear.report!("delete table ip kpng");
    await feed.idle();
    expect(applied).toEqual([]);
    feed.push(rev(1, null));
    feed.push(rev(2, ["a"]));
    await Bun.sleep(5);
    await feed.idle();
    backend.ear.report!("flush chain ip kpng services");
    await feed.idle();
    expect(applied.at(-1)).toEqual({ rev: 2, change: null });
    expect(reasons).toEqual(["delete table ip kpng", "flush chain ip kpng services"]);
    expect(log.lines.filter((l) => l.includes("rules changed by someone else"))).toHaveLength(2);
  });

  test("rules lost during an apply: a full sync follows it", async () => {
    const { backend, applied } = recorder({ delayMs: 20 });
    const feed = feedBackend(backend, { log: memoryLogger(), pauseAfter: () => 0 });
    feed.push(rev(1, null));
    await feed.idle();
    feed.push(rev(2, ["a"]));
    await Bun.sleep(5);
    backend.ear.report!("delete table ip kpng");
    await Bun.sleep(30);
    await feed.idle();
    expect(applied).toEqual([
      { rev: 1, change: null },
      { rev: 2, change: ["a"] },
      { rev: 2, change: null },
    ]);
  });

  test("syncs are paced by their cost: after a 100 ms sync, changes within the next 100 ms coalesce into one sync", async () => {
    const run = async (pauseAfter?: (ms: number) => number) => {
      // 100 ms against 10 ms sleeps: a loaded machine may sleep late, and the windows stay apart
      const { backend, applied } = recorder({ delayMs: 100 });
      const feed = feedBackend(backend, { log: memoryLogger(), pauseAfter });
      feed.push(rev(1, null));
      await feed.idle();
      feed.push(rev(2, ["a"]));
      await feed.idle();
      feed.push(rev(3, ["b"]));
      await Bun.sleep(10);
      feed.push(rev(4, ["c"]));
      feed.push(rev(5, ["d"]));
      await Bun.sleep(10);
      await feed.idle();
      return applied;
    };
    // default pacing (pacing.ts: as long again as the sync took): b, c and d come within a's pause
    expect(await run()).toEqual([
      { rev: 1, change: null },
      { rev: 2, change: ["a"] },
      { rev: 5, change: ["b", "c", "d"] },
    ]);
    // unpaced: b starts a sync at once, c and d wait for it
    expect(await run(() => 0)).toEqual([
      { rev: 1, change: null },
      { rev: 2, change: ["a"] },
      { rev: 3, change: ["b"] },
      { rev: 5, change: ["c", "d"] },
    ]);
  });

  test("a full sync does not pace the change after it: start-up's sync is no measure of the next", async () => {
    const { backend, applied } = recorder();
    const paused: number[] = [];
    const feed = feedBackend(backend, { log: memoryLogger(), pauseAfter: (ms) => (paused.push(ms), 60_000) });
    feed.push(rev(1, null));
    await feed.idle();
    feed.push(rev(2, ["a"])); // at once, although the pause asked for is a minute
    await feed.idle();
    expect(applied).toEqual([
      { rev: 1, change: null },
      { rev: 2, change: ["a"] },
    ]);
    expect(paused).toHaveLength(1); // asked after the partial sync only
    feed.push(rev(3, ["b"])); // within the partial sync's pause: waits
    await Bun.sleep(50);
    expect(applied).toHaveLength(2);
    feed.stop();
  });

  test("a storm of repairs (another kpng on the node?): beyond the burst, each waits, doubling; logged", async () => {
    const { backend, applied } = recorder();
    const log = memoryLogger();
    const feed = feedBackend(backend, { log, repairStorm: { burst: 2, windowMs: 10_000, firstDelayMs: 40, maxDelayMs: 60 } });
    feed.push(rev(1, null));
    await feed.idle();
    const fulls = () => applied.filter((a) => a.change === null).length;
    backend.ear.report!("one");
    backend.ear.report!("two");
    await feed.idle();
    expect(fulls()).toBe(3); // the first sync and two repairs at once
    backend.ear.report!("three");
    await Bun.sleep(20);
    expect(fulls()).toBe(3); // waits 40 ms
    await Bun.sleep(40);
    await feed.idle();
    expect(fulls()).toBe(4);
    backend.ear.report!("four");
    await Bun.sleep(50);
    expect(fulls()).toBe(4); // waits 60 ms (80 capped)
    await Bun.sleep(30);
    await feed.idle();
    expect(fulls()).toBe(5);
    expect(log.lines.filter((l) => l.includes("rules keep being changed")).map((l) => /delayMs=(\d+)/.exec(l)![1])).toEqual(["40", "60"]);
  });
});

test("repair pacing: at once up to the burst, then doubling to the cap; at once again when the window has emptied", () => {
  const pace = repairPacer({ burst: 2, windowMs: 1000, firstDelayMs: 10, maxDelayMs: 30 });
  // report times (ms) -> delay (undefined = at once) and reports in the window
  expect([0, 1, 2, 3, 4].map((t) => pace(t))).toEqual([
    { reports: 1 },
    { reports: 2 },
    { delayMs: 10, reports: 3 },
    { delayMs: 20, reports: 4 },
    { delayMs: 30, reports: 5 },
  ]);
  expect(pace(2000)).toEqual({ reports: 1 }); // the five above left the window
  expect(pace(2001)).toEqual({ reports: 2 });
  expect(pace(2002)).toEqual({ delayMs: 10, reports: 3 }); // the doubling started over
});
