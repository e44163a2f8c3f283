// Endpoint selection per traffic class: readiness, terminating fallback,
// traffic policies, topology hints, de-duplication, families. Each case is
// named after the rule it checks; flags: I internal, E external, L local,
// T terminating.

import { create, equals, type DescField } from "@bufbuild/protobuf";
import { describe, expect, test } from "bun:test";
import { ENDPOINT_FIELDS, sameEndpoint } from "../../src/core/brain/model/endpoints.ts";
import { EndpointSchema, PortNameSchema, type Endpoint } from "../../src/gen/localv1/services_pb.ts";
import type { K8sObject } from "../../src/core/brain/k8s/objects.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { node, slice, svc, type EpOpts, type SvcOpts } from "../fixtures/k8s.ts";
import { brainWith, localState, scopes } from "./helpers.ts";

const A = v4.pod(1, 1); // on node-1 (this node)
const B = v4.pod(2, 1); // on node-2
const C = v4.pod(3, 1); // on node-3
const ep = (ip: string, o: Partial<EpOpts> = {}): EpOpts => ({ ip, node: `node-${ip.split(".")[2]}`, ...o });
const nodes = [node("node-1", { zone: "zone-a" }), node("node-2", { zone: "zone-a" }), node("node-3", { zone: "zone-b" })];
const lb = {
  type: "LoadBalancer" as const,
  lbIngress: [{ ip: v4.external(1) }],
  ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
};

const cases: Array<{ name: string; objects: K8sObject[]; want: Record<string, string> }> = [
  {
    name: "ready endpoints are used for internal traffic; ClusterIP has no external class",
    objects: [svc(), slice({ endpoints: [ep(A), ep(B)] })],
    want: { [A]: "IL", [B]: "I" },
  },
  {
    name: "condition defaults: ready and serving absent = true, terminating absent = false",
    objects: [svc(), slice({ endpoints: [ep(A, { ready: null, serving: null, terminating: null })] })],
    want: { [A]: "IL" },
  },
  {
    name: "not-ready, not-terminating endpoints are never used",
    objects: [svc(), slice({ endpoints: [ep(A, { ready: false }), ep(B)] })],
    want: { [B]: "I" },
  },
  {
    name: "terminating endpoints are not used while a ready one exists",
    objects: [svc(), slice({ endpoints: [ep(A, { ready: false, serving: true, terminating: true }), ep(B)] })],
    want: { [B]: "I" },
  },
  {
    name: "terminating fallback: no ready endpoint, serving+terminating ones are used",
    objects: [
      svc(),
      slice({
        endpoints: [ep(A, { ready: false, serving: true, terminating: true }), ep(B, { ready: false, serving: false, terminating: true })],
      }),
    ],
    want: { [A]: "ILT" },
  },
  {
    name: "NodePort with eTP=Cluster: every ready endpoint serves both classes",
    objects: [
      svc({ type: "NodePort", ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }] }),
      slice({ endpoints: [ep(A), ep(B)] }),
    ],
    want: { [A]: "IEL", [B]: "IE" },
  },
  {
    name: "eTP=Local: external traffic only to this node's endpoints, internal to all",
    objects: [svc({ ...lb, eTP: "Local" }), slice({ endpoints: [ep(A), ep(B)] })],
    want: { [A]: "IEL", [B]: "I" },
  },
  {
    name: "eTP=Local with no local endpoint: no external endpoint at all (traffic dropped), no fallback to other nodes",
    objects: [svc({ ...lb, eTP: "Local" }), slice({ endpoints: [ep(B), ep(C)] })],
    want: { [B]: "I", [C]: "I" },
  },
  {
    name: "eTP=Local terminating fallback is local too: a local terminating endpoint serves external traffic",
    objects: [svc({ ...lb, eTP: "Local" }), slice({ endpoints: [ep(A, { ready: false, serving: true, terminating: true }), ep(B)] })],
    want: { [A]: "ELT", [B]: "I" },
  },
  {
    name: "iTP=Local: internal traffic only to this node's endpoints",
    objects: [svc({ iTP: "Local" }), slice({ endpoints: [ep(A), ep(B)] })],
    want: { [A]: "IL" },
  },
  {
    name: "iTP=Local with no local endpoint: nothing",
    objects: [svc({ iTP: "Local" }), slice({ endpoints: [ep(B)] })],
    want: {},
  },
  {
    name: "externalIPs make a ClusterIP service externally accessible, so eTP applies",
    objects: [svc({ externalIPs: [v4.external(5)], eTP: "Local" }), slice({ endpoints: [ep(A), ep(B)] })],
    want: { [A]: "IEL", [B]: "I" },
  },
  {
    name: "eTP=Local is ignored on a plain ClusterIP service (not externally accessible)",
    objects: [svc({ eTP: "Local" }), slice({ endpoints: [ep(A), ep(B)] })],
    want: { [A]: "IL", [B]: "I" },
  },
  {
    name: "zone hints: only endpoints hinted for this node's zone",
    objects: [
      ...nodes,
      svc(),
      slice({ endpoints: [ep(A, { forZones: ["zone-a"] }), ep(B, { forZones: ["zone-a"] }), ep(C, { forZones: ["zone-b"] })] }),
    ],
    want: { [A]: "IL", [B]: "I" },
  },
  {
    name: "zone hints ignored when one ready endpoint has none",
    objects: [...nodes, svc(), slice({ endpoints: [ep(A, { forZones: ["zone-a"] }), ep(C)] })],
    want: { [A]: "IL", [C]: "I" },
  },
  {
    name: "zone hints ignored when none names this node's zone",
    objects: [...nodes, svc(), slice({ endpoints: [ep(B, { forZones: ["zone-b"] }), ep(C, { forZones: ["zone-b"] })] })],
    want: { [B]: "I", [C]: "I" },
  },
  {
    name: "zone hints: a not-ready endpoint without hints does not disable them",
    objects: [
      ...nodes,
      svc(),
      slice({ endpoints: [ep(A, { forZones: ["zone-a"] }), ep(C, { forZones: ["zone-b"] }), ep(B, { ready: false })] }),
    ],
    want: { [A]: "IL" },
  },
  {
    name: "node hints win over zone hints",
    objects: [
      ...nodes,
      svc(),
      slice({ endpoints: [ep(A, { forNodes: ["node-2"], forZones: ["zone-a"] }), ep(B, { forNodes: ["node-1"], forZones: ["zone-a"] })] }),
    ],
    want: { [B]: "I" },
  },
  {
    name: "node hints not naming this node fall back to zone hints",
    objects: [
      ...nodes,
      svc(),
      slice({ endpoints: [ep(A, { forNodes: ["node-2"], forZones: ["zone-a"] }), ep(C, { forNodes: ["node-3"], forZones: ["zone-b"] })] }),
    ],
    want: { [A]: "IL" },
  },
  {
    name: "topology never narrows Local-policy traffic",
    objects: [
      ...nodes,
      svc({ ...lb, eTP: "Local" }),
      slice({ endpoints: [ep(A, { forZones: ["zone-b"] }), ep(B, { forZones: ["zone-a"] })] }),
    ],
    want: { [A]: "EL", [B]: "I" },
  },
  {
    name: "topology narrows ready endpoints only; the terminating fallback is not narrowed",
    objects: [
      ...nodes,
      svc(),
      slice({
        endpoints: [
          ep(A, { ready: false, serving: true, terminating: true, forZones: ["zone-b"] }),
          ep(C, { ready: false, serving: true, terminating: true, forZones: ["zone-b"] }),
        ],
      }),
    ],
    want: { [A]: "ILT", [C]: "IT" },
  },
  {
    name: "de-duplication across slices: a non-terminating copy wins",
    objects: [
      svc(),
      slice({ name: "web-1", endpoints: [ep(A, { ready: false, serving: true, terminating: true })] }),
      slice({ name: "web-2", endpoints: [ep(A)] }),
    ],
    want: { [A]: "IL" },
  },
  {
    name: "slices labelled headless are ignored",
    objects: [svc(), slice({ endpoints: [ep(A)], labels: { "kubernetes.io/service-name": "web", "service.kubernetes.io/headless": "" } })],
    want: {},
  },
  {
    name: "slices without kubernetes.io/service-name are ignored",
    objects: [svc(), slice({ endpoints: [ep(A)], labels: { app: "web" } })],
    want: {},
  },
  {
    name: "a slice of a family the service does not serve is ignored",
    objects: [svc(), slice({ family: "IPv6", endpoints: [ep(v6.pod(1, 1), { node: "node-1" })] })],
    want: {},
  },
  {
    name: "dual-stack: each family is computed on its own (v4 falls back to terminating, v6 has a ready endpoint)",
    objects: [
      svc({ clusterIPs: [v4.clusterIP(10), v6.clusterIP(10)] }),
      slice({ endpoints: [ep(A, { ready: false, serving: true, terminating: true })] }),
      slice({
        family: "IPv6",
        endpoints: [
          { ip: v6.pod(1, 1), node: "node-1", ready: false, serving: true, terminating: true },
          { ip: v6.pod(2, 1), node: "node-2" },
        ],
      }),
    ],
    want: { [A]: "ILT", [v6.pod(2, 1)]: "I" },
  },
];

describe("endpoint selection", () => {
  for (const c of cases) {
    test(c.name, () => {
      expect(scopes(localState(c.objects).services.get("default/web"))).toEqual(c.want);
    });
  }
});

describe("endpoint identity", () => {
  for (const n of [3, 40]) {
    test(`${n} endpoints: a pod name taken twice keys the second by its address; an IP in two slices is one endpoint`, () => {
      const ips = Array.from({ length: n }, (_, i) => v4.pod(1 + (i % 3), 10 + i));
      const st = localState([
        svc(),
        slice({ name: "web-1", endpoints: ips.map((ip, i) => ep(ip, { pod: i === n - 1 ? "p0" : `p${i}` })) }),
        slice({ name: "web-2", endpoints: [ep(ips[1], { pod: "p1" })] }),
      ]);
      const keys = [...st.services.get("default/web")!.endpoints.keys()];
      expect(keys.length).toBe(n);
      expect(keys.slice(0, -1)).toEqual(ips.slice(0, -1).map((_, i) => `p${i}`));
      expect(keys.at(-1)).toMatch(/^ip-[0-9a-f]{16}$/);
    });
  }

  test("endpoints are keyed by pod name; without a pod, by a stable hash without '/'", () => {
    const st = localState([svc(), slice({ endpoints: [ep(A, { pod: "web-1" }), ep(B, { pod: "" })] })]);
    const keys = [...st.services.get("default/web")!.endpoints.keys()];
    expect(keys[0]).toBe("web-1");
    expect(keys[1]).toMatch(/^ip-[0-9a-f]{16}$/);
    const again = localState([svc(), slice({ endpoints: [ep(B, { pod: "" })] })]);
    expect([...again.services.get("default/web")!.endpoints.keys()]).toEqual([keys[1]]);
  });

  test("a dual-stack pod gets one endpoint per family with distinct keys", () => {
    const st = localState([
      svc({ clusterIPs: [v4.clusterIP(10), v6.clusterIP(10)] }),
      slice({ endpoints: [ep(A, { pod: "p" })] }),
      slice({ family: "IPv6", endpoints: [{ ip: v6.pod(1, 1), node: "node-1", pod: "p" }] }),
    ]);
    expect([...st.services.get("default/web")!.endpoints.keys()].sort()).toEqual(["p", "p.v6"]);
  });

  test("in a v6-only service a pod's endpoint is keyed by the pod name alone", () => {
    const st = localState([
      svc({ clusterIPs: [v6.clusterIP(10)] }),
      slice({ family: "IPv6", endpoints: [{ ip: v6.pod(1, 1), node: "node-1", pod: "p" }] }),
    ]);
    expect([...st.services.get("default/web")!.endpoints.keys()]).toEqual(["p"]);
  });

  test("every named service port gets a PortOverride from the slice port of the same name", () => {
    const st = localState([
      svc({
        ports: [
          { name: "http", port: 80, targetPort: "web" },
          { name: "metrics", port: 9090, targetPort: 9090 },
        ],
      }),
      slice({
        ports: [
          { name: "http", port: 8080 },
          { name: "metrics", port: 9091 },
        ],
        endpoints: [ep(A)],
      }),
    ]);
    const e = [...st.services.get("default/web")!.endpoints.values()][0];
    expect(e.PortOverrides.map((p) => [p.Name, p.Port])).toEqual([
      ["http", 8080],
      ["metrics", 9091],
    ]);
  });
});

test("each slice's endpoints get the overrides of that slice's ports (a service of several slices)", () => {
  const C = v4.pod(3, 1);
  const st = localState([
    svc({ ports: [{ name: "http", port: 80, targetPort: "web" }] }),
    slice({ name: "web-1", ports: [{ name: "http", port: 8080 }], endpoints: [ep(A), ep(B)] }),
    slice({ name: "web-2", ports: [{ name: "http", port: 8081 }], endpoints: [ep(C)] }),
    slice({ name: "web-3", ports: [{ name: "http", port: 8082 }], endpoints: [ep(v4.pod(4, 1))] }),
  ]);
  const byIP = new Map([...st.services.get("default/web")!.endpoints.values()].map((e) => [e.IPs!.V4[0], e.PortOverrides]));
  expect([...byIP].map(([ip, o]) => [ip, o.map((p) => p.Port)])).toEqual([
    [A, [8080]],
    [B, [8080]],
    [C, [8081]],
    [v4.pod(4, 1), [8082]],
  ]);
  // one list per slice, shared by its endpoints
  expect(byIP.get(A)).toBe(byIP.get(B)!);
});

describe("endpoint equality (sameEndpoint: what keeps an unchanged endpoint's identity)", () => {
  const base = () =>
    create(EndpointSchema, {
      Hostname: "h",
      IPs: { V4: [A], V6: [] },
      Local: true,
      PortOverrides: [{ Name: "http", Port: 8080 }],
      Scopes: { Internal: true, External: false },
      Terminating: false,
      NodeName: "node-1",
      Zone: "zone-a",
    });
  /** one change per field sameEndpoint must see */
  const changes: Record<string, (e: Endpoint) => void> = {
    Hostname: (e) => (e.Hostname = "g"),
    "IPs.V4": (e) => (e.IPs!.V4 = [B]),
    "IPs.V6": (e) => (e.IPs!.V6 = [v6.pod(1, 1)]),
    Local: (e) => (e.Local = false),
    "PortOverrides.Name": (e) => (e.PortOverrides[0].Name = "web"),
    "PortOverrides.Port": (e) => (e.PortOverrides[0].Port = 8081),
    Scopes: (e) => (e.Scopes = undefined),
    "Scopes.Internal": (e) => (e.Scopes!.Internal = false),
    "Scopes.External": (e) => (e.Scopes!.External = true),
    Terminating: (e) => (e.Terminating = true),
    NodeName: (e) => (e.NodeName = "node-2"),
    Zone: (e) => (e.Zone = "zone-b"),
    IPs: (e) => (e.IPs = undefined),
    "one more port override": (e) => e.PortOverrides.push(create(PortNameSchema, { Name: "m", Port: 9090 })),
  };

  test("every field of the Endpoint schema is compared (a new proto field must be added to sameEndpoint)", () => {
    const leaves = (fields: readonly DescField[], prefix = ""): string[] =>
      fields.flatMap((f) => (f.message ? leaves(f.message.fields, `${prefix}${f.localName}.`) : [`${prefix}${f.localName}`]));
    expect(leaves(EndpointSchema.fields).sort()).toEqual([...ENDPOINT_FIELDS].sort());
    for (const f of ENDPOINT_FIELDS) expect(Object.keys(changes)).toContain(f);
  });

  test("equal copies are the same endpoint", () => expect(sameEndpoint(base(), base())).toBe(true));

  for (const [field, change] of Object.entries(changes))
    test(`a change of ${field} is a different endpoint, as protobuf equality says`, () => {
      const e = base();
      change(e);
      expect(sameEndpoint(base(), e)).toBe(false);
      expect(equals(EndpointSchema, base(), e)).toBe(false);
    });
});

describe("endpoint reuse across revisions (a slice change creates only the endpoints it changed)", () => {
  type Change = { ep?: Partial<EpOpts>; other?: Partial<EpOpts>; ports?: { name: string; port: number }[]; svc?: SvcOpts };
  const objects = (c: Change) => [
    ...nodes,
    svc(c.svc),
    slice({ ports: c.ports, endpoints: [ep(A, { pod: "p", ...c.ep }), ep(B, { pod: "q", ...c.other })] }),
  ];
  const cases: { name: string; change: Change; reused: boolean }[] = [
    { name: "nothing of it changed (its neighbour did)", change: { other: { ip: C } }, reused: true },
    { name: "its address (same pod)", change: { ep: { ip: C } }, reused: false },
    { name: "its node (no longer local)", change: { ep: { node: "node-2" } }, reused: false },
    { name: "its zone", change: { ep: { zone: "zone-b" } }, reused: false },
    {
      name: "terminating, used as the fallback",
      change: { ep: { ready: false, terminating: true }, other: { ready: false, terminating: true } },
      reused: false,
    },
    {
      name: "its scopes (the service becomes a NodePort: external traffic too)",
      change: { svc: { type: "NodePort", ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }] } },
      reused: false,
    },
    { name: "an equal copy of the service", change: { svc: { ports: [{ name: "http", port: 80, targetPort: 8080 }] } }, reused: true },
    { name: "the slice port's number", change: { ports: [{ name: "http", port: 8081 }] }, reused: false },
    {
      name: "the service port's name",
      change: { svc: { ports: [{ name: "web", port: 80, targetPort: 8080 }] }, ports: [{ name: "web", port: 8080 }] },
      reused: false,
    },
  ];
  for (const c of cases)
    test(`${c.name}: ${c.reused ? "the same object" : "a new endpoint"}, equal to a fresh computation`, () => {
      const brain = brainWith(objects({}));
      const view = brain.view("node-1");
      const before = view.state!.services.get("default/web")!.endpoints.get("p");
      brain.apply(objects(c.change).map((object) => ({ type: "upsert" as const, object })));
      brain.flush();
      const after = view.state!.services.get("default/web")!.endpoints.get("p");
      expect(after).toEqual(localState(objects(c.change)).services.get("default/web")!.endpoints.get("p")!);
      expect(after === before).toBe(c.reused);
    });
});
