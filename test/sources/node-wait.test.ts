// Waiting for the Node's addresses at start-up (a cluster source may register
// the Node after kpng starts): bounded and logged, as upstream does.

import { describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { kinds } from "../../src/core/brain/k8s/objects.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { waitForNodeIPs } from "../../src/core/sources/index.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, svc } from "../fixtures/k8s.ts";
import { loadedBound } from "../harness/load.ts";

function syncedBrain(objects: Parameters<Brain["apply"]>[0] = []) {
  const brain = new Brain();
  brain.apply(objects);
  for (const k of kinds) brain.markSynced(k);
  brain.flush();
  return brain;
}

describe("waiting for the node's IPs", () => {
  test("already known: no wait, nothing logged", async () => {
    const brain = syncedBrain([{ type: "upsert", object: node("node-1", { ips: [v4.node(1)] }) }]);
    const log = memoryLogger();
    expect(await waitForNodeIPs(brain.view("node-1"), { timeoutMs: 10_000, log })).toEqual([v4.node(1)]);
    expect(log.lines).toEqual([]);
  });

  test("the Node registers later: resolves with its IPs as soon as it does", async () => {
    const brain = new Brain();
    const log = memoryLogger();
    const t0 = performance.now();
    const waiting = waitForNodeIPs(brain.view("node-1"), { timeoutMs: 10_000, log });
    // the source syncs first without the Node, then the Node shows up
    brain.apply([{ type: "upsert", object: svc() }]);
    for (const k of kinds) brain.markSynced(k);
    brain.flush();
    setTimeout(() => {
      brain.apply([{ type: "upsert", object: node("node-1", { ips: [v4.node(1)] }) }]);
      brain.flush();
    }, 20);
    expect(await waiting).toEqual([v4.node(1)]);
    // as soon as it does: well before the 10 s timeout on a machine with a core to spare
    expect(performance.now() - t0).toBeLessThan(loadedBound(5_000));
    expect(log.lines.join("\n")).toMatch(/INFO test: waiting for the Node's InternalIP\/ExternalIP node=node-1 timeoutSeconds=10/);
  });

  test("the Node is listed, the other kinds are not yet (a big cluster): its IPs are known at once, no warning", async () => {
    // 50,000 services: the Node's list is in after ~0.3 s, the EndpointSlices' after ~36 s
    const brain = new Brain();
    brain.apply([{ type: "upsert", object: node("node-1", { ips: [v4.node(1)] }) }]);
    brain.markSynced("Node");
    const log = memoryLogger();
    expect(await waitForNodeIPs(brain.view("node-1"), { timeoutMs: 500, log })).toEqual([v4.node(1)]);
    expect(log.lines.join("\n")).not.toMatch(/WARN/);
    expect(brain.view("node-1").state).toBeNull(); // nothing published before every kind is listed
  });

  test("the Node comes in while the other kinds are still listing: resolves as it does", async () => {
    const brain = new Brain();
    const log = memoryLogger();
    const waiting = waitForNodeIPs(brain.view("node-1"), { timeoutMs: 5_000, log });
    setTimeout(() => {
      brain.apply([{ type: "upsert", object: node("node-1", { ips: [v4.node(1)] }) }]);
      brain.markSynced("Node");
    }, 20);
    expect(await waiting).toEqual([v4.node(1)]);
    expect(log.lines.join("\n")).not.toMatch(/WARN/);
  });

  test("never registers: gives up after the bound with a warning, resolves with none", async () => {
    const brain = syncedBrain([{ type: "upsert", object: node("node-1") }]);
    const log = memoryLogger();
    expect(await waitForNodeIPs(brain.view("node-1"), { timeoutMs: 50, log })).toEqual([]);
    expect(log.lines.at(-1)).toMatch(/WARN test: Node not found or without an address.*node=node-1/);
  });
});
