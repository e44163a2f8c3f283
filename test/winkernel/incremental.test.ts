// Incremental changes produce minimal HNS call sequences; restarts converge
// without deleting and re-creating what is already right.

import { describe, expect, test } from "bun:test";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { hnsRecorder } from "../../plugins/winkernel/recorder.ts";
import factory from "../../plugins/winkernel/index.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { v4 } from "../fixtures/addresses.ts";
import { type ServiceSpec, endpoint, entry, service } from "../ipvs/services.ts";
import { createLb, deleteEp, deleteLb, modifyLb, primedRig, remoteEp, rig, send, testConfig } from "./harness.ts";

const C = (i: number) => v4.clusterIP(i);
const P = (i: number) => v4.pod(2, i);

// web-i: cluster IP + node port = 2 policies over remote pods.
const spec = (i: number, extra: Partial<ServiceSpec> = {}): ServiceSpec => ({
  name: `web-${i}`,
  clusterIPs: [C(i)],
  ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30000 + i }],
  ...extra,
});
const web = (i: number, pods: number[], extra: Partial<ServiceSpec> = {}): [string, ServiceEndpoints] =>
  entry(service(spec(i, extra)), Object.fromEntries(pods.map((p) => [`p${p}`, endpoint({ ips: [P(p)] })])));

/** web-1 over pods 1 and 2: endpoints get ids 1, 2; policies 3 (cluster IP), 4 (node port). */
async function withWeb1() {
  const r = await primedRig();
  send(r.backend, [web(1, [1, 2])]);
  await r.backend.sync();
  r.hns.clear();
  return r;
}
const cluster = (eps: number[]) => ({ eps, vip: C(1), internal: 8080, external: 80 });
const nodePort = (eps: number[]) => ({ eps, internal: 8080, external: 30001, portFlags: 2 });

describe("winkernel incremental changes", () => {
  test("remote endpoint added: 1 endpoint create + 1 modify per policy", async () => {
    const r = await withWeb1();
    r.backend.setEndpoint("default", "web-1", "p3", endpoint({ ips: [P(3)] }));
    await r.backend.sync();
    // 1 create + 2 policies modified = 3 calls
    expect(r.hns.calls).toEqual([remoteEp(5, P(3)), modifyLb(3, cluster([1, 2, 5])), modifyLb(4, nodePort([1, 2, 5]))]);
  });

  test("remote endpoint removed: 1 modify per policy, then the endpoint deleted", async () => {
    const r = await withWeb1();
    r.backend.deleteEndpoint("default", "web-1", "p2");
    await r.backend.sync();
    // 2 modifies + 1 endpoint delete (after, so no policy references it) = 3 calls
    expect(r.hns.calls).toEqual([modifyLb(3, cluster([1])), modifyLb(4, nodePort([1])), deleteEp(2)]);
  });

  test("the same objects sent again: no call", async () => {
    const r = await withWeb1();
    send(r.backend, [web(1, [1, 2])]);
    await r.backend.sync();
    expect(r.hns.calls).toEqual([]);
  });

  test("last endpoint removed: policies deleted (no endpoint, no policy), then the endpoints", async () => {
    const r = await withWeb1();
    r.backend.deleteEndpoint("default", "web-1", "p1");
    r.backend.deleteEndpoint("default", "web-1", "p2");
    await r.backend.sync();
    expect(r.hns.calls).toEqual([deleteLb(3), deleteLb(4), deleteEp(1), deleteEp(2)]);
  });

  test("service deleted (endpoints first, as the API orders it): policies then endpoints deleted", async () => {
    const r = await withWeb1();
    r.backend.deleteEndpoint("default", "web-1", "p1");
    r.backend.deleteEndpoint("default", "web-1", "p2");
    r.backend.deleteService("default", "web-1");
    await r.backend.sync();
    expect(r.hns.calls).toEqual([deleteLb(3), deleteLb(4), deleteEp(1), deleteEp(2)]);
    expect(r.hns.loadBalancers.size).toBe(0);
    expect(r.hns.endpoints.size).toBe(0);
  });

  test("service port changed: the old policy deleted before the new one is created", async () => {
    const r = await withWeb1();
    send(r.backend, [entry(service({ ...spec(1), ports: [{ name: "http", port: 81, targetPort: 8080, nodePort: 30001 }] }), {})]);
    await r.backend.sync();
    expect(r.hns.calls).toEqual([deleteLb(3), createLb(5, { ...cluster([1, 2]), external: 81 })]);
  });

  test("affinity turned on: each policy modified in place", async () => {
    const r = await withWeb1();
    send(r.backend, [web(1, [1, 2], { affinitySeconds: 100 })]);
    await r.backend.sync();
    expect(r.hns.calls).toEqual([modifyLb(3, { ...cluster([1, 2]), dist: 2 }), modifyLb(4, { ...nodePort([1, 2]), dist: 2 })]);
  });

  // 200 services, 400 policies: a sync that went through them all would make hundreds of calls
  // (1,000 services showed the same, for most of this file's CPU)
  test("one endpoint change among 200 services costs the same 3 calls", async () => {
    const r = await primedRig();
    send(
      r.backend,
      Array.from({ length: 200 }, (_, i) => web(i + 1, [i % 200, (i + 1) % 200])),
    );
    await r.backend.sync();
    r.hns.clear();
    r.backend.setEndpoint("default", "web-100", "p250", endpoint({ ips: [P(250)] }));
    await r.backend.sync();
    expect(r.hns.calls.map((c) => c.call)).toEqual(["HcnCreateEndpoint", "HcnModifyLoadBalancer", "HcnModifyLoadBalancer"]);
    expect(r.backend.last.calls).toBe(3);
  });
});

describe("winkernel restarts", () => {
  test("brain restart: every object re-sent, then sync: no HNS call", async () => {
    const r = await primedRig();
    const all = [web(1, [1, 2]), web(2, [2, 3], { affinitySeconds: 0 })];
    send(r.backend, all);
    await r.backend.sync();
    r.hns.clear();
    send(r.backend, all); // the client library after a reconnect, before it learns what is unchanged
    await r.backend.sync();
    expect(r.hns.calls).toEqual([]);
  });

  test("brain restart with a service gone meanwhile: only its objects deleted", async () => {
    const r = await primedRig();
    send(r.backend, [web(1, [1, 2]), web(2, [3])]); // ids: eps 1,2 lbs 3,4; ep 5 lbs 6,7
    await r.backend.sync();
    r.hns.clear();
    send(r.backend, [web(1, [1, 2])]);
    r.backend.deleteEndpoint("default", "web-2", "p3"); // synthesised by the client library
    r.backend.deleteService("default", "web-2");
    await r.backend.sync();
    expect(r.hns.calls).toEqual([deleteLb(6), deleteLb(7), deleteEp(5)]);
  });

  test("backend restart: the new process adopts matching policies and endpoints (two list calls only)", async () => {
    const first = await primedRig();
    const all = [web(1, [1, 2]), web(2, [2, 3], { affinitySeconds: 30 })];
    send(first.backend, all);
    await first.backend.sync();
    const second = rig(testConfig(), first.hns); // same HNS, fresh process
    first.hns.clear();
    send(second.backend, all);
    await second.backend.sync();
    expect(first.hns.calls).toEqual([{ call: "HcnEnumerateEndpoints" }, { call: "HcnEnumerateLoadBalancers" }]);
    // and it now owns them: an endpoint change is a modify of the adopted policy
    first.hns.clear();
    second.backend.deleteEndpoint("default", "web-1", "p1");
    await second.backend.sync();
    // pod 1 served web-1 only: its remote endpoint goes too
    expect(first.hns.calls.map((c) => c.call)).toEqual(["HcnModifyLoadBalancer", "HcnModifyLoadBalancer", "HcnDeleteEndpoint"]);
  });

  test("backend restart after changes while down: changed policy modified, leftovers deleted", async () => {
    const first = await primedRig();
    send(first.backend, [web(1, [1, 2]), web(2, [3])]); // eps 1,2 lbs 3,4; ep 5 lbs 6,7
    await first.backend.sync();
    const second = rig(testConfig(), first.hns);
    first.hns.clear();
    send(second.backend, [web(1, [1])]); // web-1 lost pod 2, web-2 is gone
    await second.backend.sync();
    expect(first.hns.calls).toEqual([
      { call: "HcnEnumerateEndpoints" },
      { call: "HcnEnumerateLoadBalancers" },
      modifyLb(3, cluster([1])),
      modifyLb(4, nodePort([1])),
      deleteLb(6),
      deleteLb(7),
      deleteEp(2),
      deleteEp(5),
    ]);
  });

  test("a failed HNS call: the next sync re-reads HNS and converges without duplicates", async () => {
    let failing = true;
    const r = await primedRig([], undefined, { fail: (c) => failing && c.call === "HcnCreateLoadBalancer" && c.id.endsWith("4") });
    send(r.backend, [web(1, [1, 2])]); // eps 1,2, lb 3 created, lb 4 fails
    await expect(r.backend.sync()).rejects.toThrow("recorded failure");
    failing = false;
    r.hns.clear();
    await r.backend.sync();
    const calls = r.hns.calls.map((c) => c.call);
    expect(calls.slice(0, 2)).toEqual(["HcnEnumerateEndpoints", "HcnEnumerateLoadBalancers"]);
    expect(r.hns.loadBalancers.size).toBe(2); // cluster IP + node port, nothing twice
    expect(r.hns.endpoints.size).toBe(2);
  });

  test("dry-run prints each HNS call as one JSON line", async () => {
    const out: string[] = [];
    const ctx = { config: testConfig({ dryRun: true }), log: memoryLogger(), out: (t: string) => out.push(t) };
    const backend = await factory(ctx);
    if (backend.kind !== "incremental") throw new Error("winkernel must be incremental");
    send(backend as never, [web(1, [1])]);
    await backend.sync();
    const calls = out
      .join("")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { call: string });
    expect(calls.map((c) => c.call)).toEqual([
      "HcnEnumerateEndpoints",
      "HcnEnumerateLoadBalancers",
      "HcnCreateEndpoint",
      "HcnCreateLoadBalancer",
      "HcnCreateLoadBalancer",
    ]);
  });

  test("cleanup deletes every policy and remote endpoint, keeping the CNI's local ones", async () => {
    const hns = hnsRecorder();
    hns.addLocalEndpoint(v4.pod(1, 5));
    const r = rig(testConfig(), hns);
    send(r.backend, [web(1, [1, 2])]);
    await r.backend.sync();
    await r.backend.cleanup();
    expect(hns.loadBalancers.size).toBe(0);
    expect([...hns.endpoints.values()].map((e) => e.ip)).toEqual([v4.pod(1, 5)]);
  });
});
