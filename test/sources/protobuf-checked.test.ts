// Services and EndpointSlices read straight into their checked objects
// (src/core/sources/protobuf/checked.ts) must be exactly what reading them
// into their JSON shape and then parseObject makes of them: every field of a
// full, well-formed object is deleted or replaced by values of every kind,
// and each variant's bytes are read both ways (alone, and concatenated with
// the full object's, so that fields come twice). The checked reading may
// decline any object (the other way then reads it); what it takes must come
// out the same, key order included, with nothing parseObject would note.

import { describe, expect, test } from "bun:test";
import { parseObject, type Kind } from "../../src/core/brain/k8s/objects.ts";
import { checkedReaders } from "../../src/core/sources/protobuf/checked.ts";
import { decodeObject } from "../../src/core/sources/protobuf/envelope.ts";
import { ProtoError, Reader } from "../../src/core/sources/protobuf/wire.ts";
import { node, service, slice } from "../../bench/startup-api-server.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { encodeItem } from "../harness/protobuf-encode.ts";
import { variants } from "../brain/differential.ts";

const fullService = () => ({
  kind: "Service",
  metadata: {
    name: "web",
    namespace: "ns",
    resourceVersion: "7",
    labels: { app: "web", "service.kubernetes.io/service-proxy-name": "x" },
    annotations: { note: "ü", "kubectl.kubernetes.io/last-applied-configuration": "{}" },
  },
  spec: {
    type: "LoadBalancer",
    clusterIP: v4.clusterIP(1),
    clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
    ipFamilies: ["IPv4", "IPv6"],
    externalIPs: ["203.0.113.7"],
    loadBalancerSourceRanges: ["10.0.0.0/8"],
    ports: [
      { name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 30080 },
      { name: "dns", protocol: "UDP", port: 53, targetPort: "dns", nodePort: 30053 },
    ],
    sessionAffinity: "ClientIP",
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 300 } },
    externalTrafficPolicy: "Local",
    internalTrafficPolicy: "Cluster",
    healthCheckNodePort: 31000,
  },
  status: { loadBalancer: { ingress: [{ ip: "192.0.2.10" }, { ip: "192.0.2.11", ipMode: "Proxy" }] } },
});

const fullSlice = () => ({
  kind: "EndpointSlice",
  metadata: { name: "web-abc", namespace: "ns", labels: { "kubernetes.io/service-name": "web" }, annotations: { a: "b" } },
  addressType: "IPv4",
  endpoints: [
    {
      addresses: [v4.pod(1, 1), v4.pod(1, 2)],
      conditions: { ready: true, serving: true, terminating: false },
      hostname: "h",
      nodeName: "node-1",
      zone: "zone-a",
      hints: { forZones: [{ name: "zone-a" }], forNodes: [{ name: "node-1" }] },
      targetRef: { kind: "Pod", name: "web-1", namespace: "ns" },
    },
    {
      addresses: [v4.pod(2, 1)],
      conditions: { ready: false },
      nodeName: "node-2",
      zone: "zone-b",
      targetRef: { kind: "Pod", name: "web-2", namespace: "ns" },
    },
  ],
  ports: [
    { name: "http", protocol: "TCP", port: 8080 },
    { name: "", protocol: "UDP", port: 53 },
  ],
});

const replacements: unknown[] = [
  "",
  "x",
  "None",
  "TCP",
  "QUIC",
  "IPv6",
  "FQDN",
  "Local",
  "NodePort",
  "ExternalName",
  "ClientIP",
  "Pod",
  "constructor",
  "198.019.1.5",
  "2001:DB8::5",
  "2001:db8::5",
  "10.0.0.1/8",
  0,
  -1,
  70000,
  1,
  true,
  false,
  [],
  {},
  ["a"],
  [v4.clusterIP(2)],
  [v6.pod(1, 1)],
  [{ name: "n" }],
  { constructor: "x" },
];

/** the bytes of `o`, or null when the test encoder cannot write what it holds */
function bytes(o: Record<string, unknown>): Buffer | null {
  try {
    return Buffer.from(encodeItem(o.kind as string, o));
  } catch {
    return null;
  }
}

/** the checked reading of `buf`, null when it declines (or the bytes are bad) */
function checked(kind: Kind, buf: Buffer) {
  try {
    return checkedReaders[kind](new Reader(buf, 0), buf.length);
  } catch (err) {
    if (err instanceof ProtoError) return null;
    throw err;
  }
}

/** what the checked reading took of `buf` is what parseObject makes of its JSON shape; returns whether it took it */
function agrees(kind: Kind, buf: Buffer): boolean {
  const c = checked(kind, buf);
  if (!c) return false;
  const res = parseObject(decodeObject(kind, buf, 0, buf.length), kind);
  expect(res.ok).toBe(true);
  if (!res.ok) return true;
  expect(res.notes).toBeUndefined();
  expect(c.object).toStrictEqual(res.object as never);
  expect(JSON.stringify(c.object)).toBe(JSON.stringify(res.object));
  expect(c.metadata.name).toBe(res.object.metadata.name);
  expect(c.metadata.namespace).toBe(res.object.metadata.namespace);
  return true;
}

function differential(kind: Kind, full: () => Record<string, unknown>) {
  const base = bytes(full())!;
  let taken = 0;
  let declined = 0;
  for (const o of variants(full, replacements)) {
    const b = bytes(o);
    if (!b) continue;
    for (const buf of [b, Buffer.concat([b, base]), Buffer.concat([base, b])]) {
      if (agrees(kind, buf)) taken++;
      else declined++;
    }
  }
  return { taken, declined };
}

describe("read straight into the checked object: the same as the JSON shape read by parseObject", () => {
  test("a full well-formed Service and EndpointSlice are taken", () => {
    expect(agrees("Service", bytes(fullService())!)).toBe(true);
    expect(agrees("EndpointSlice", bytes(fullSlice())!)).toBe(true);
  });

  test("objects as an API server sends them (the startup bench's) are taken", () => {
    for (let i = 0; i < 3; i++) {
      expect(agrees("Service", bytes(service(i))!)).toBe(true);
      expect(agrees("EndpointSlice", bytes(slice(i, 3, v6.pod(1, 1)))!)).toBe(true);
    }
  });

  test("every field of a Service deleted or replaced, alone and with each field twice", () => {
    const { taken, declined } = differential("Service", fullService);
    // both ways are reached: taken as it is, and declined for the JSON-shape path
    expect(taken).toBeGreaterThan(300);
    expect(declined).toBeGreaterThan(300);
  });

  test("every field of an EndpointSlice deleted or replaced, alone and with each field twice", () => {
    const { taken, declined } = differential("EndpointSlice", fullSlice);
    expect(taken).toBeGreaterThan(300);
    expect(declined).toBeGreaterThan(300);
  });

  test("a first address in another spelling is put as kube-proxy prints it, as the fast path does", () => {
    const sloppy = fullSlice();
    sloppy.endpoints[1].addresses = ["010.1.2.3"];
    expect(agrees("EndpointSlice", bytes(sloppy)!)).toBe(true);
    const read = checked("EndpointSlice", bytes(sloppy)!)!.object as { endpoints: Array<{ addresses: string[] }> };
    expect(read.endpoints[1].addresses).toEqual(["10.1.2.3"]);
  });

  test("what only the JSON-shape path reads is declined: a first address of the other family, an unknown value, no name", () => {
    const sloppy = fullSlice();
    sloppy.endpoints[1].addresses = [v6.pod(1, 1)];
    const unknown = fullService();
    unknown.spec.type = "Magic";
    const unnamed = fullService();
    unnamed.metadata.name = "";
    expect(checked("EndpointSlice", bytes(sloppy)!)).toBeNull();
    expect(checked("Service", bytes(unknown)!)).toBeNull();
    expect(checked("Service", bytes(unnamed)!)).toBeNull();
    // a Node is never read this way
    expect(checkedReaders.Node).toBeUndefined();
    expect(bytes(node(0))).not.toBeNull();
  });

  test("names with bytes past ASCII, every conditions triple, a targetRef that is no Pod: read as the JSON-shape path reads them", () => {
    const o = fullSlice();
    o.metadata.name = "wëb-ü";
    o.metadata.labels = { "kubernetes.io/service-name": "wëb", ключ: "значение ✓" } as typeof o.metadata.labels;
    const [a, b] = o.endpoints;
    Object.assign(a, { nodeName: "nöde-1", zone: "zöne-a", targetRef: { kind: "Pod", name: "pöd-✓-1", namespace: "ns" } });
    b.targetRef = { kind: "Node", name: "not-a-pod", namespace: "ns" };
    const read = checked("EndpointSlice", bytes(o)!)!.object as { endpoints: Array<Record<string, unknown>> };
    expect(agrees("EndpointSlice", bytes(o)!)).toBe(true);
    expect(read.endpoints[0]).toMatchObject({ nodeName: "nöde-1", zone: "zöne-a", pod: "pöd-✓-1" });
    expect(read.endpoints[1].pod).toBeUndefined();
    for (const ready of [true, false])
      for (const serving of [true, false])
        for (const terminating of [true, false]) {
          a.conditions = { ready, serving, terminating };
          expect(agrees("EndpointSlice", bytes(o)!)).toBe(true);
          const c = checked("EndpointSlice", bytes(o)!)!.object as { endpoints: Array<{ conditions: unknown }> };
          expect(c.endpoints[0].conditions).toEqual({ ready, serving, terminating });
        }
  });

  test("conditions written otherwise than Go writes them (another order, a bool as 2) read as the JSON-shape path reads them", () => {
    const o = fullSlice();
    o.endpoints = [{ addresses: [v4.pod(1, 1)], conditions: { ready: true, serving: true, terminating: false } }] as never;
    const base = bytes(o)!;
    // EndpointConditions as Go writes it: 08 01 10 01 18 00 (ready, serving, terminating)
    const at = base.indexOf(Buffer.from([0x12, 6, 8, 1, 16, 1, 24, 0]));
    expect(at).toBeGreaterThan(0);
    for (const conditions of [
      [24, 0, 16, 1, 8, 1],
      [8, 2, 16, 1, 24, 0],
      [8, 1, 16, 1, 24, 1],
      [8, 0, 16, 0, 24, 2],
    ]) {
      const buf = Buffer.from(base);
      buf.set(conditions, at + 2);
      expect(agrees("EndpointSlice", buf)).toBe(true);
    }
  });
});
