// A node agent fed from the global stream computes exactly the full brain's
// node-local state (every field, endpoint keys included), for every rule the
// brain applies, on every node; and after changes, the agent gets only the
// change.

import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseClusterFile } from "../../src/core/sources/file.ts";
import type { K8sEndpointSlice, K8sObject } from "../../src/core/brain/k8s/objects.ts";
import { serviceModel } from "../../src/core/brain/model/service.ts";
import { serviceFromModel } from "../../src/core/global/decode.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { Pipeline } from "./helpers.ts";
import { globalOps } from "../../src/core/api/server/global-watch.ts";
import type { WireOp } from "../../src/core/wire/ops.ts";
import type { ClusterEvent } from "../../src/core/brain/cluster.ts";
import { GlobalMirror } from "../../src/core/global/mirror.ts";

const fail = (e: string) => {
  throw new Error(e);
};

const ROOT = join(import.meta.dir, "../..");
const nodes = [
  node("node-1", { zone: "zone-a", ips: [v4.node(1)] }),
  node("node-2", { zone: "zone-a", ips: [v4.node(2)] }),
  node("node-3", { zone: "zone-b", ips: [v4.node(3), v6.node(3)] }),
];
const NODES = ["node-1", "node-2", "node-3"];

const cases: Array<{ name: string; objects: K8sObject[] }> = [
  {
    name: "the embedded example cluster",
    objects: parseClusterFile("cluster.yaml", readFileSync(join(ROOT, "examples/cluster.yaml"), "utf8")).objects,
  },
  {
    name: "eTP=Local NodePort with health-check port: only local endpoints external",
    objects: [
      svc({
        type: "LoadBalancer",
        eTP: "Local",
        healthCheckNodePort: 32000,
        ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
        lbIngress: [{ ip: v4.external(1) }, { ip: v4.external(2), ipMode: "Proxy" }],
        sourceRanges: ["198.18.128.0/24"],
      }),
      slice({
        endpoints: [
          { ip: v4.pod(1, 1), node: "node-1" },
          { ip: v4.pod(2, 1), node: "node-2" },
        ],
      }),
    ],
  },
  {
    name: "iTP=Local, affinity, external IPs, named and unnamed target ports",
    objects: [
      svc({
        iTP: "Local",
        affinity: 600,
        externalIPs: [v4.external(3)],
        ports: [
          { name: "web", port: 80, targetPort: "http" },
          { name: "dns", protocol: "UDP", port: 53 },
        ],
      }),
      slice({
        ports: [
          { name: "web", port: 8080 },
          { name: "dns", protocol: "UDP", port: 5353 },
        ],
        endpoints: [
          { ip: v4.pod(1, 2), node: "node-1" },
          { ip: v4.pod(3, 2), node: "node-3", pod: "" },
        ],
      }),
    ],
  },
  {
    name: "terminating fallback: only serving-terminating endpoints left",
    objects: [
      svc(),
      slice({
        endpoints: [
          { ip: v4.pod(1, 3), node: "node-1", ready: false, serving: true, terminating: true },
          { ip: v4.pod(2, 3), node: "node-2", ready: false, serving: false, terminating: true },
        ],
      }),
    ],
  },
  {
    name: "topology hints: zone hints and node hints narrow Cluster traffic",
    objects: [
      svc({ name: "zoned" }),
      slice({
        service: "zoned",
        endpoints: [
          { ip: v4.pod(1, 4), node: "node-1", zone: "zone-a", forZones: ["zone-a"] },
          { ip: v4.pod(3, 4), node: "node-3", zone: "zone-b", forZones: ["zone-b"] },
        ],
      }),
      svc({ name: "noded", clusterIPs: [v4.clusterIP(11)] }),
      slice({
        service: "noded",
        endpoints: [
          { ip: v4.pod(1, 5), node: "node-1", forNodes: ["node-1"], forZones: ["zone-a"] },
          { ip: v4.pod(2, 5), node: "node-2", forNodes: ["node-2"], forZones: ["zone-a"] },
        ],
      }),
    ],
  },
  {
    name: "dual-stack service: one endpoint per family, v6 key pod.v6",
    objects: [
      svc({ clusterIPs: [v4.clusterIP(12), v6.clusterIP(12)] }),
      slice({ endpoints: [{ ip: v4.pod(1, 6), node: "node-1", pod: "p6" }] }),
      slice({ family: "IPv6", endpoints: [{ ip: v6.pod(1, 6), node: "node-1", pod: "p6" }] }),
    ],
  },
  {
    name: "ignored: headless slice, other proxy's service, endpoints of another family",
    objects: [
      svc({ name: "other", labels: { "service.kubernetes.io/service-proxy-name": "someone-else" }, clusterIPs: [v4.clusterIP(13)] }),
      slice({ service: "other", endpoints: [{ ip: v4.pod(1, 7) }] }),
      svc({ name: "v4only", clusterIPs: [v4.clusterIP(14)] }),
      slice({ service: "v4only", family: "IPv6", endpoints: [{ ip: v6.pod(1, 7) }] }),
      slice({
        service: "v4only",
        name: "hl",
        labels: { "kubernetes.io/service-name": "v4only", "service.kubernetes.io/headless": "" },
        endpoints: [{ ip: v4.pod(1, 8) }],
      }),
    ],
  },
  {
    name: "an endpoint in two slices: one entry, ports merged, the non-terminating copy wins",
    objects: [
      svc({
        ports: [
          { name: "a", port: 80, targetPort: "a" },
          { name: "b", port: 81, targetPort: "b" },
        ],
      }),
      slice({
        name: "web-1",
        ports: [{ name: "a", port: 8080 }],
        endpoints: [{ ip: v4.pod(1, 9), node: "node-1", terminating: true, serving: true, ready: false }],
      }),
      slice({ name: "web-2", ports: [{ name: "b", port: 8081 }], endpoints: [{ ip: v4.pod(1, 9), node: "node-1" }] }),
    ],
  },
];

describe("agent state equals the full brain's", () => {
  for (const c of cases) {
    test(c.name, () => {
      const p = new Pipeline([...nodes, ...c.objects]);
      expect(p.bad).toEqual([]);
      for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
      expect(p.agentState("node-1")!.services.length).toBeGreaterThan(0);
      expect(p.agentState("node-3")!.nodeIPs).toEqual([v4.node(3), v6.node(3)]);
    });
  }
});

describe("the service model survives the round trip", () => {
  for (const c of cases) {
    test(c.name, () => {
      for (const o of c.objects) if (o.kind === "Service") expect(serviceModel(serviceFromModel(serviceModel(o)))).toEqual(serviceModel(o));
    });
  }
});

describe("changes reach the agent as changes", () => {
  const base = () =>
    new Pipeline([
      ...nodes,
      svc(),
      slice({
        endpoints: [
          { ip: v4.pod(1, 1), node: "node-1" },
          { ip: v4.pod(2, 1), node: "node-2" },
        ],
      }),
      svc({ name: "db", clusterIPs: [v4.clusterIP(20)] }),
    ]);

  test("one endpoint turning not ready: one EndpointInfo set, nothing else", () => {
    const p = base();
    const ops = p.update([
      {
        type: "upsert",
        object: slice({
          endpoints: [
            { ip: v4.pod(1, 1), node: "node-1" },
            { ip: v4.pod(2, 1), node: "node-2", ready: false, serving: false },
          ],
        }),
      },
    ]);
    expect(ops.map((o) => `${o.op} ${"path" in o ? o.path : ""}`)).toEqual([`set default|web|web-ipv4|${v4.pod(2, 1)}`]);
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
  });

  test("a service deleted: its endpoints deleted before it, in one change set", () => {
    const p = base();
    const ops = p.update([{ type: "delete", kind: "Service", namespace: "default", name: "web" }]);
    expect(ops.map((o) => `${o.op} ${"path" in o ? o.path : ""}`)).toEqual([
      `delete default|web|web-ipv4|${v4.pod(1, 1)}`,
      `delete default|web|web-ipv4|${v4.pod(2, 1)}`,
      "delete default|web||",
    ]);
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
  });

  test("a node's zone changes: one NodeInfo set; the slice moving to another service moves its endpoints", () => {
    const p = base();
    const ops = p.update([
      { type: "upsert", object: node("node-1", { zone: "zone-b", ips: [v4.node(1)] }) },
      { type: "upsert", object: slice({ service: "db", name: "web-ipv4", endpoints: [{ ip: v4.pod(1, 1), node: "node-1" }] }) },
    ]);
    expect(ops.map((o) => `${o.op} ${"path" in o ? o.path : ""}`).sort()).toEqual(
      [
        "set |node-1||",
        `set default|db|web-ipv4|${v4.pod(1, 1)}`,
        `delete default|web|web-ipv4|${v4.pod(1, 1)}`,
        `delete default|web|web-ipv4|${v4.pod(2, 1)}`,
      ].sort(),
    );
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
  });

  test("a resync (Reset, whole model again) of an unchanged cluster: no event, no new revision", () => {
    const p = base();
    const rev = p.agent.view("node-1").state!.rev;
    p.sync(true);
    expect(p.lastEvents).toEqual([]);
    expect(p.agent.view("node-1").state!.rev).toBe(rev);
  });

  test("a change set cut short by a broken stream, then a resync: nothing lost, the agent equals the brain", () => {
    const p = base();
    // The brain deletes db and moves web's endpoint; the stream breaks halfway through that change set.
    p.full.apply([
      { type: "delete", kind: "Service", namespace: "default", name: "db" },
      { type: "upsert", object: slice({ endpoints: [{ ip: v4.pod(3, 1), node: "node-3" }] }) },
    ]);
    p.full.flush();
    const ops = globalOps(null, p.model.snapshot!, null);
    p.mirror.begin(false);
    for (const op of ops.slice(0, Math.ceil(ops.length / 2))) p.mirror.op(op, () => {});
    p.sync(true); // a new stream: Reset and the whole model
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
    expect(p.agentState("node-1")!.services.map((s) => s.key)).toEqual(["default/web"]);
  });

  test("a slice handed to the brain never changes under it: the next change to it is made on a copy", () => {
    const p = base();
    const given = p.agent.cluster.get("EndpointSlice", "default", "web-ipv4")! as K8sEndpointSlice;
    const before = structuredClone(given.endpoints);
    p.update([
      {
        type: "upsert",
        object: slice({
          endpoints: [
            { ip: v4.pod(1, 1), node: "node-1", ready: false },
            { ip: v4.pod(2, 1), node: "node-2" },
          ],
        }),
      },
    ]);
    p.update([{ type: "upsert", object: slice({ endpoints: [{ ip: v4.pod(1, 1), node: "node-1", ready: false }] }) }]);
    expect(given.endpoints).toEqual(before);
    expect((p.agent.cluster.get("EndpointSlice", "default", "web-ipv4") as K8sEndpointSlice).endpoints!.map((e) => e.addresses[0])).toEqual(
      [v4.pod(1, 1)],
    );
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
  });

  test("endpoint keys that are not the endpoint's IP (another server's paths): set, replaced, deleted and resynced by key", () => {
    const p = base();
    const eps = p.sent[0].filter((o): o is Extract<WireOp, { op: "set" }> => o.op === "set" && o.path.startsWith("default|web|web-ipv4|"));
    const [a, b] = eps.map((o) => ({ ...o, path: o.path.replace(/[^|]*$/, o === eps[0] ? "ka" : "kb") }));
    const m = new GlobalMirror();
    const ips = (events: ClusterEvent[]) =>
      events.flatMap((e) =>
        e.type === "upsert" && e.object.kind === "EndpointSlice" ? [e.object.endpoints!.map((x) => x.addresses[0])] : [],
      );
    expect(ips(m.apply({ reset: true, ops: [a, b] }, fail))).toEqual([[v4.pod(1, 1), v4.pod(2, 1)]]);
    // key ka now carries b's endpoint: replaced in place, not added
    expect(ips(m.apply({ reset: false, ops: [{ ...a, bytes: b.bytes }] }, fail))).toEqual([[v4.pod(2, 1), v4.pod(2, 1)]]);
    expect(ips(m.apply({ reset: false, ops: [{ op: "delete", set: b.set, path: b.path }] }, fail))).toEqual([[v4.pod(2, 1)]]);
    expect(m.apply({ reset: true, ops: [{ ...a, bytes: b.bytes }] }, fail)).toEqual([]);
    expect(m.size.endpoints).toBe(1);
  });

  test("a resync after changes missed while disconnected: only those become events", () => {
    const p = base();
    const rev = p.agent.view("node-1").state!.rev;
    // The brain moves on while the agent is away (these change sets are never sent).
    p.full.apply([
      { type: "delete", kind: "Service", namespace: "default", name: "db" },
      { type: "upsert", object: slice({ endpoints: [{ ip: v4.pod(1, 1), node: "node-1" }] }) },
    ]);
    p.full.flush();
    p.sync(true);
    expect(
      p.lastEvents
        .map((e) => (e.type === "delete" ? `delete ${e.kind} ${e.name}` : `upsert ${e.object.kind} ${e.object.metadata.name}`))
        .sort(),
    ).toEqual(["delete Service db", "upsert EndpointSlice web-ipv4"]);
    expect(p.agent.view("node-1").state!.rev).toBe(rev + 1);
    for (const n of NODES) expect(p.agentState(n)).toEqual(p.fullState(n));
  });
});
