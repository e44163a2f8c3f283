// Feeding several backends: each gets every revision, and start-up is over
// once every backend holds its first sync, whichever order they finish in,
// a failed first sync included (it is retried after feed.ts's default delay).

import { describe, expect, test } from "bun:test";
import type { Revision } from "../../src/core/brain/brain.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { FullStateBackend } from "../../src/host/backend.ts";
import { feedAll, firstSyncs } from "../../src/host/feed-all.ts";

const rev = (n: number): Revision => ({ state: { nodeName: "n", rev: n, services: new Map() }, change: null });

describe("firstSyncs", () => {
  test("true exactly once: at the sync that completes every backend's first", () => {
    const first = firstSyncs(3);
    expect([first.synced(1), first.synced(1), first.synced(0), first.synced(2), first.synced(2), first.synced(0)]).toEqual([
      false,
      false,
      false,
      true,
      false,
      false,
    ]);
  });
  test("one backend: its first sync", () => {
    const first = firstSyncs(1);
    expect([first.synced(0), first.synced(0)]).toEqual([true, false]);
  });
  test("no backend: never", () => {
    expect(firstSyncs(0).synced(0)).toBe(false);
  });
});

describe("feedAll", () => {
  function backend(name: string, opts: { delayMs: number; failFirst?: boolean }, events: string[]): FullStateBackend {
    let fail = opts.failFirst ?? false;
    return {
      kind: "full",
      name,
      async apply(s: NodeState) {
        await Bun.sleep(opts.delayMs);
        if (fail) {
          fail = false;
          throw new Error("nft: transaction failed");
        }
        events.push(`${name} ${s.rev}`);
      },
    };
  }

  test("every backend gets every revision; started up once, after the slowest backend's first sync", async () => {
    const events: string[] = [];
    const errors: string[] = [];
    const backends = [backend("fast", { delayMs: 0 }, events), backend("slow", { delayMs: 30, failFirst: true }, events)];
    const feeds = feedAll(backends, {
      log: memoryLogger(),
      onSynced: (b, state) => events.push(`synced ${b.name} ${state.rev}`),
      onStartedUp: () => events.push("started up"),
      onError: (b) => errors.push(b.name),
    });
    feeds.push(rev(1));
    const deadline = Date.now() + 30_000; // against a hang only: a loaded machine takes seconds
    while (!events.includes("started up") && Date.now() < deadline) await Bun.sleep(10);
    feeds.push(rev(2));
    while (events.filter((e) => e.startsWith("synced")).length < 4 && Date.now() < deadline) await Bun.sleep(10);
    await feeds.idle();
    feeds.stop();
    expect(errors).toEqual(["slow"]);
    const seen = events.filter((e) => e.startsWith("synced") || e === "started up");
    expect(seen.slice(0, 3)).toEqual(["synced fast 1", "synced slow 1", "started up"]);
    expect(seen.slice(3).sort()).toEqual(["synced fast 2", "synced slow 2"]);
  });
});
