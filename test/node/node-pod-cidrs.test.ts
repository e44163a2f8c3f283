// detectLocalMode NodeCIDR's pod CIDRs, as kube-proxy takes them: waited for
// at start-up (bounded), then fixed; a Node naming others ends the process.

import { describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { type K8sNode, kinds } from "../../src/core/brain/k8s/objects.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { waitForPodCIDRs, watchPodCIDRs } from "../../src/core/node/node-pod-cidrs.ts";
import { node, svc } from "../fixtures/k8s.ts";

const withCIDRs = (name: string, podCIDRs: string[], deleting = false): K8sNode => {
  const n = node(name);
  return {
    ...n,
    metadata: { ...n.metadata, ...(deleting ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}) },
    spec: { podCIDRs },
  };
};

function syncedBrain(objects: K8sNode[] = []) {
  const brain = new Brain();
  brain.apply([{ type: "upsert", object: svc() }, ...objects.map((object) => ({ type: "upsert" as const, object }))]);
  for (const k of kinds) brain.markSynced(k);
  brain.flush();
  return brain;
}
const update = (brain: Brain, object: K8sNode) => {
  brain.apply([{ type: "upsert", object }]);
  brain.flush();
};

describe("waiting for the Node's pod CIDRs", () => {
  test("already there: at once, nothing logged", async () => {
    const log = memoryLogger();
    const brain = syncedBrain([withCIDRs("n1", ["10.244.1.0/24", "fd00:1::/64"])]);
    expect(await waitForPodCIDRs(brain, "n1", { timeoutMs: 10_000, log })).toEqual(["10.244.1.0/24", "fd00:1::/64"]);
    expect(log.lines).toEqual([]);
  });

  test("allocated later: resolves when the Node gets them, says it waits", async () => {
    const log = memoryLogger();
    const brain = syncedBrain([node("n1")]);
    const waiting = waitForPodCIDRs(brain, "n1", { timeoutMs: 10_000, log });
    setTimeout(() => update(brain, withCIDRs("n1", ["10.244.1.0/24"])), 20);
    expect(await waiting).toEqual(["10.244.1.0/24"]);
    expect(log.lines.join("\n")).toMatch(/waiting for the Node's spec\.podCIDRs node=n1 timeoutSeconds=10/);
  });

  test("a Node being deleted does not count (kube-proxy's waitForPodCIDR): no CIDRs by the bound", async () => {
    const brain = syncedBrain([withCIDRs("n1", ["10.244.1.0/24"], true)]);
    const r = await waitForPodCIDRs(brain, "n1", { timeoutMs: 50, log: memoryLogger() }).catch((e: Error) => e.message);
    expect(r).toMatch(/node n1 spec\.podCIDRs: none after 0\.05s/);
  });

  test("never allocated: an error after the bound (exit 1, not bad input)", async () => {
    const brain = syncedBrain([node("n1")]);
    const err = await waitForPodCIDRs(brain, "n1", { timeoutMs: 50, log: memoryLogger() }).catch((e: unknown) => e);
    expect(String(err)).toMatch(/\[unavailable\] node n1 spec\.podCIDRs: none after 0\.05s; detectLocalMode NodeCIDR needs them/);
  });
});

describe("watching them afterwards", () => {
  const settle = <T>(p: Promise<T>) =>
    Promise.race([
      p.then(
        () => "resolved",
        (e: Error) => e.message,
      ),
      Bun.sleep(30).then(() => "pending"),
    ]);

  test("the same CIDRs, other Nodes, a deleted Node: nothing", async () => {
    const brain = syncedBrain([withCIDRs("n1", ["10.244.1.0/24"])]);
    const w = watchPodCIDRs(brain, "n1", ["10.244.1.0/24"]);
    update(brain, { ...withCIDRs("n1", ["10.244.1.0/24"]), metadata: { name: "n1", labels: { a: "b" } } });
    update(brain, withCIDRs("n2", ["10.244.2.0/24"]));
    brain.apply([{ type: "delete", kind: "Node", namespace: "", name: "n1" }]);
    brain.flush();
    expect(await settle(w.changed)).toBe("pending");
    w.stop();
  });

  test("the Node comes back with other CIDRs: rejected, naming both", async () => {
    const brain = syncedBrain([withCIDRs("n1", ["10.244.1.0/24"])]);
    const w = watchPodCIDRs(brain, "n1", ["10.244.1.0/24"]);
    update(brain, withCIDRs("n1", ["10.244.9.0/24"]));
    expect(await settle(w.changed)).toMatch(/node n1 spec\.podCIDRs changed from 10\.244\.1\.0\/24 to 10\.244\.9\.0\/24/);
  });
});
