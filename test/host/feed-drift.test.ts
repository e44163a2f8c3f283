// Rules lost, named (issue 36): when a backend reports that someone else
// changed its rules, the feed asks it what differs (Backend.verify) before
// the repair sync puts them back, and logs one line naming the Services and
// frontends that lost rules. A backend that cannot tell is repaired all the
// same.

import { describe, expect, test } from "bun:test";
import type { Revision } from "../../src/core/brain/brain.ts";
import type { NodeState, StateChange } from "../../src/core/brain/state.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Drift, FullStateBackend } from "../../src/host/backend.ts";
import { feedBackend } from "../../src/host/feed.ts";

const rev = (n: number): Revision => ({ state: { nodeName: "n", rev: n, services: new Map() }, change: null });

function backend(check: () => Promise<Drift[]>) {
  const calls: string[] = [];
  const ear: { report?: (reason: string) => void } = {};
  const b: FullStateBackend = {
    kind: "full",
    name: "rec",
    watchRules: (report) => {
      ear.report = report;
    },
    async apply(s: NodeState, change: StateChange) {
      calls.push(`apply ${s.rev} ${change === null ? "full" : "partial"}`);
    },
    async verify(service) {
      calls.push(`verify ${service ?? "all"}`);
      return check();
    },
  };
  return { b, calls, ear };
}

const lostWeb: Drift[] = [
  {
    service: "default/web",
    frontend: "198.18.0.1:80/TCP",
    kind: "missing",
    detail: "element 198.18.0.1 . tcp . 80 in map ip kpng service-ips",
  },
  { service: "", frontend: "", kind: "extra", detail: "rule ip daddr 198.18.0.9 drop in chain services" },
];

/** waits for `ok`, bounded only against a hang (a loaded machine takes seconds for a few turns) */
async function until(ok: () => boolean) {
  const end = performance.now() + 30_000;
  while (!ok() && performance.now() < end) await Bun.sleep(5);
}

describe("feed: rules lost are named before the repair", () => {
  test("verify runs once, after the report and before the repair's full sync; the log line names what was missing", async () => {
    const { b, calls, ear } = backend(async () => lostWeb);
    const log = memoryLogger();
    const feed = feedBackend(b, { log });
    feed.push(rev(1));
    await feed.idle();
    ear.report!("element deleted from map service-ips");
    await until(() => calls.length === 3);
    await feed.idle();
    expect(calls).toEqual(["apply 1 full", "verify all", "apply 1 full"]);
    const line = log.lines.find((l) => l.includes("rules lost"));
    expect(line).toBeDefined();
    expect(line).toContain("default/web 198.18.0.1:80/TCP");
    expect(line).toContain("service-ips");
    expect(line).toContain("198.18.0.9"); // the rule someone added, as a change
    expect(line).toContain("element deleted from map service-ips");
    feed.stop();
  });

  test("a check that fails does not hold the repair back", async () => {
    const { b, calls, ear } = backend(async () => {
      throw new Error("nft: cannot list");
    });
    const log = memoryLogger();
    const feed = feedBackend(b, { log });
    feed.push(rev(1));
    await feed.idle();
    ear.report!("table deleted");
    await until(() => calls.length === 3);
    await feed.idle();
    expect(calls).toEqual(["apply 1 full", "verify all", "apply 1 full"]);
    expect(log.lines.some((l) => l.includes("cannot read back what was lost") && l.includes("nft: cannot list"))).toBe(true);
    feed.stop();
  });

  test("a check that takes too long is cut short: the repair runs, the line says so", async () => {
    let answered = false;
    const { b, calls, ear } = backend(
      () =>
        new Promise((resolve) =>
          setTimeout(() => {
            answered = true;
            resolve(lostWeb);
          }, 2000),
        ),
    );
    const log = memoryLogger();
    const feed = feedBackend(b, { log, lostCheckMs: 50 });
    feed.push(rev(1));
    await feed.idle();
    ear.report!("table deleted");
    await until(() => calls.length === 3);
    // cut short: the repair ran before the check answered (not "within 1.5 s": a loaded machine's clock)
    expect(answered).toBe(false);
    expect(calls).toEqual(["apply 1 full", "verify all", "apply 1 full"]);
    expect(log.lines.some((l) => l.includes("not named, reading them back took too long") && l.includes("limitMs=50"))).toBe(true);
    feed.stop();
  });

  test("a report before the first revision checks nothing (nothing was programmed)", async () => {
    const { b, calls, ear } = backend(async () => lostWeb);
    const feed = feedBackend(b, { log: memoryLogger() });
    ear.report!("table deleted");
    feed.push(rev(1));
    await feed.idle();
    expect(calls).toEqual(["apply 1 full"]);
    feed.stop();
  });
});
