// The ingest is every source's way into the brain: nothing is published
// before every kind is synced, `at-once` recomputes in the same turn, and
// `paced` batches what arrives before its timer fires, at most once per an
// operator's minSyncPeriod.

import { describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { parseObject, type K8sObject } from "../../src/core/brain/k8s/objects.ts";
import { Ingest, type FlushPolicy } from "../../src/core/sources/ingest.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";

const parsed = (raw: unknown): K8sObject => {
  const r = parseObject(raw);
  if (!r.ok) throw new Error("fixture invalid");
  return r.object;
};

const NODE = "node-a";
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** a brain serving NODE, an ingest with `policy`, and the revisions the view publishes */
function setup(policy: FlushPolicy) {
  const brain = new Brain();
  const revs: number[] = [];
  brain.view(NODE).subscribe((r) => revs.push(r.state.rev));
  const ingest = new Ingest(brain, policy);
  const web = (ip: string) => parsed(slice({ service: "web", endpoints: [{ ip }] }));
  return { brain, ingest, revs, web };
}

function syncAll(ingest: Ingest, web: K8sObject) {
  ingest.upsert(parsed(node(NODE)));
  ingest.upsert(parsed(svc({ name: "web" })));
  ingest.upsert(web);
  ingest.syncedAll();
}

describe("Ingest", () => {
  test("nothing is published before every kind is synced", () => {
    const { ingest, revs, web } = setup({ type: "at-once" });
    ingest.upsert(parsed(svc({ name: "web" })));
    ingest.upsert(web("198.19.1.5"));
    ingest.synced("Service");
    ingest.synced("EndpointSlice");
    ingest.changed();
    expect(revs).toEqual([]);
    ingest.synced("Node");
    ingest.changed();
    expect(revs).toEqual([1]);
  });

  test("at-once: each change is a revision in the same turn", () => {
    const { ingest, revs, web } = setup({ type: "at-once" });
    syncAll(ingest, web("198.19.1.5"));
    ingest.changed();
    ingest.upsert(web("198.19.1.6"));
    ingest.changed();
    expect(revs).toEqual([1, 2]);
    expect(ingest.flushes).toBe(2);
  });

  test("paced: changes that arrive before the timer fires are one revision", async () => {
    const { brain, ingest, revs, web } = setup({ type: "paced", minSyncPeriodMs: 0 });
    syncAll(ingest, web("198.19.1.5"));
    ingest.changed();
    expect(revs).toEqual([]); // not in the same turn
    await sleep(20);
    expect(revs).toEqual([1]);
    for (const ip of ["198.19.1.6", "198.19.1.7", "198.19.1.8"]) {
      ingest.upsert(web(ip));
      ingest.changed();
    }
    while (revs.length < 2) await sleep(5);
    await sleep(50);
    expect(revs).toEqual([1, 2]); // three changes, one revision
    expect([...brain.view(NODE).state!.services.get("default/web")!.endpoints.values()].map((e) => e.IPs?.V4)).toEqual([["198.19.1.8"]]);
    ingest.close();
  });

  test("paced with a minSyncPeriod: the next flush waits for the period", async () => {
    const { brain, ingest, revs, web } = setup({ type: "paced", minSyncPeriodMs: 500 });
    const at: number[] = [];
    brain.view(NODE).subscribe(() => at.push(performance.now()));
    syncAll(ingest, web("198.19.1.5"));
    ingest.changed();
    while (revs.length < 1) await sleep(5);
    ingest.upsert(web("198.19.1.6"));
    ingest.changed();
    while (revs.length < 2) await sleep(5);
    // measured, not sampled: a loaded machine may sleep late, never early
    expect(at[1] - at[0]).toBeGreaterThanOrEqual(490);
    ingest.close();
  });

  test("replace deletes what a complete list lacks; an unchanged object is no event", () => {
    const { brain, ingest, revs, web } = setup({ type: "at-once" });
    syncAll(ingest, web("198.19.1.5"));
    ingest.changed();
    const events = brain.stats.events;
    ingest.replace("Service", [parsed(svc({ name: "web" }))]);
    expect(brain.stats.events).toBe(events);
    ingest.replace("Service", []);
    ingest.changed();
    expect(brain.cluster.count("Service")).toBe(0);
    expect(revs).toEqual([1, 2]);
  });

  test("a first list added without comparing gives the state upserting it gives", () => {
    const objects = [
      parsed(node(NODE)),
      parsed(svc({ name: "web" })),
      parsed(svc({ name: "api", type: "NodePort", ports: [{ name: "http", port: 80, nodePort: 30080 }] })),
      parsed(slice({ service: "web", endpoints: [{ ip: "198.19.1.5", node: NODE }, { ip: "198.19.1.6" }] })),
      parsed(slice({ service: "api", endpoints: [{ ip: "198.19.1.7" }] })),
    ];
    const states = (hand: (ingest: Ingest, o: K8sObject) => void) => {
      const { brain, ingest } = setup({ type: "at-once" });
      for (const o of objects) hand(ingest, o);
      ingest.syncedAll();
      ingest.changed();
      return { state: brain.view(NODE).state, events: brain.stats.events };
    };
    const added = states((ingest, o) => ingest.add(o));
    const upserted = states((ingest, o) => ingest.upsert(o));
    expect(added.state?.services.size).toBe(2);
    expect([...added.state!.services]).toEqual([...upserted.state!.services]);
    expect(added.events).toBe(upserted.events);
  });
});
