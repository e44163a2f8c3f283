// The protobuf decoder (src/core/sources/protobuf/) against an encoder
// written apart from it (test/harness/protobuf-encode.ts): every object of the
// corpus and of the fixtures, and one with every field kpng reads set, reads
// the same through protobuf as through JSON; a body cut short or with bytes
// changed gives a clear error for that object or that answer, never a
// crash; fields kpng does not read (managedFields among them) are skipped.

import { describe, expect, test } from "bun:test";
import { Checked, parseObject, type Kind } from "../../src/core/brain/k8s/objects.ts";
import { decodeObject, ListDecoder, UNDECODABLE, WatchDecoder } from "../../src/core/sources/protobuf/envelope.ts";
import { ProtoError } from "../../src/core/sources/protobuf/wire.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { corpus, corpusNode } from "../fixtures/corpus/cases.ts";
import { asSent, node, slice, svc } from "../fixtures/k8s.ts";
import { encodeItem, encodeList, encodeWatchEvent } from "../harness/protobuf-encode.ts";

type Obj = Record<string, any>;

const managedFields = [
  {
    manager: "kube-controller-manager",
    operation: "Update",
    apiVersion: "v1",
    fieldsType: "FieldsV1",
    fieldsV1: { "f:spec": { "f:ports": {} } },
  },
];

/** every field kpng reads, set */
const full: Obj[] = [
  {
    kind: "Service",
    metadata: {
      name: "full",
      namespace: "ns",
      resourceVersion: "7",
      labels: { a: "b", "service.kubernetes.io/service-proxy-name": "x" },
      annotations: { note: "ü ünïcode ✓" },
      managedFields,
      finalizers: ["f"],
    },
    spec: {
      type: "LoadBalancer",
      clusterIP: v4.clusterIP(1),
      clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
      ipFamilies: ["IPv4", "IPv6"],
      ipFamilyPolicy: "RequireDualStack",
      externalIPs: ["203.0.113.7", "2001:db8::7"],
      loadBalancerSourceRanges: ["10.0.0.0/8", " 192.0.2.0/24 "],
      ports: [
        { name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 30080, appProtocol: "http" },
        { name: "dns", protocol: "UDP", port: 53, targetPort: "dns", nodePort: 30053 },
        { name: "s", protocol: "SCTP", port: 9, targetPort: 9 },
      ],
      selector: { app: "x" },
      sessionAffinity: "ClientIP",
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 300 } },
      externalTrafficPolicy: "Local",
      internalTrafficPolicy: "Local",
      healthCheckNodePort: 31000,
    },
    status: {
      loadBalancer: {
        ingress: [{ ip: "198.51.100.1", ipMode: "VIP" }, { ip: "198.51.100.2", ipMode: "Proxy" }, { hostname: "lb.example" }],
      },
    },
  },
  {
    kind: "EndpointSlice",
    metadata: { name: "full-abc", namespace: "ns", labels: { "kubernetes.io/service-name": "full" }, managedFields },
    addressType: "IPv4",
    endpoints: [
      {
        addresses: ["10.1.0.1", "10.1.0.2"],
        conditions: { ready: false, serving: true, terminating: true },
        hostname: "h",
        nodeName: "node-1",
        zone: "zone-a",
        hints: { forZones: [{ name: "zone-a" }, { name: "zone-b" }], forNodes: [{ name: "node-1" }] },
        targetRef: { kind: "Pod", name: "p", namespace: "ns", uid: "u" },
      },
      { addresses: ["10.1.0.3"], conditions: {} },
    ],
    ports: [{ name: "http", protocol: "TCP", port: 8080, appProtocol: "http" }, { name: "", port: 53, protocol: "UDP" }, { name: "all" }],
  },
  {
    kind: "Node",
    metadata: {
      name: "node-1",
      labels: { "topology.kubernetes.io/zone": "zone-a" },
      deletionTimestamp: "2026-01-02T03:04:05Z",
      managedFields,
    },
    spec: {
      podCIDR: "10.244.0.0/24",
      podCIDRs: ["10.244.0.0/24", "fd00:10:244::/64"],
      taints: [
        { key: "ToBeDeletedByClusterAutoscaler", value: "1", effect: "NoSchedule" },
        { key: "x", effect: "NoExecute" },
      ],
    },
    status: {
      addresses: [
        { type: "InternalIP", address: "192.0.2.1" },
        { type: "Hostname", address: "node-1" },
      ],
    },
  },
];

const fixtures: Obj[] = [
  svc(),
  svc({ name: "np", type: "NodePort", ports: [{ name: "a", port: 80, targetPort: "web", nodePort: 30001 }], eTP: "Local" }),
  svc({ name: "lb", type: "LoadBalancer", lbIngress: [{ ip: "1.2.3.4" }], sourceRanges: ["10.0.0.0/8"], affinity: 60, iTP: "Local" }),
  svc({ name: "v6", clusterIPs: [v6.clusterIP(3)] }),
  slice({
    endpoints: [
      { ip: v4.pod(1, 1), node: "node-1", zone: "zone-a", ready: true, forZones: ["zone-a"], forNodes: ["node-1"] },
      { ip: v4.pod(1, 2), ready: false, terminating: true, serving: null, pod: "" },
    ],
  }),
  slice({ family: "IPv6", endpoints: [{ ip: v6.pod(1, 1) }] }),
  node("node-1", { zone: "zone-a", ips: [v4.node(1)] }),
].map((o) => asSent(o as never));

const cases: Array<{ name: string; object: Obj }> = [
  ...full.map((object) => ({ name: `every field: ${object.kind}`, object })),
  ...fixtures.map((object) => ({ name: `fixture: ${object.kind} ${object.metadata.name}`, object })),
  ...corpus.flatMap((c) => c.objects.map((object) => ({ name: `corpus ${c.id}: ${String(object.kind)}`, object: object as Obj }))),
  { name: "corpus node", object: corpusNode },
];

/**
 * What no reader can tell apart, dropped from both sides: an empty object
 * or list and an absent one (Go's JSON writes `status: {loadBalancer: {}}`
 * and `null` lists where protobuf writes nothing), and a targetPort of 0
 * (protobuf always carries IntOrString; API servers default it to the port).
 */
function settled(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(settled);
  if (typeof x !== "object" || x === null) return x;
  const out: Obj = {};
  for (const [k, v] of Object.entries(x)) {
    const s = settled(v);
    if (s === null || s === undefined || (k === "targetPort" && s === 0)) continue;
    if (typeof s === "object" && !Array.isArray(s) && Object.keys(s as Obj).length === 0) continue;
    out[k] = s;
  }
  return out;
}

/** a list holding `o`, decoded `chunk` bytes at a time (items cross chunk boundaries) */
function throughProtobuf(o: Obj, chunk = 13): Obj[] {
  const body = encodeList(o.kind, [encodeItem(o.kind, o), encodeItem(o.kind, o)], { resourceVersion: "9" });
  const d = new ListDecoder(o.kind);
  const items: Obj[] = [];
  for (let i = 0; i < body.length; i += chunk) items.push(...d.push(body.subarray(i, i + chunk)));
  d.end();
  return items;
}

/** `o` read into the shape its JSON has (objects.ts), as every object that is not read straight into its checked one */
function jsonShaped(o: Obj): Obj {
  const item = Buffer.from(encodeItem(o.kind, o));
  return decodeObject(o.kind, item, 0, item.length);
}

/** a list item as the API server's JSON has it: no kind */
function throughJSON(o: Obj): Obj {
  const { kind: _k, apiVersion: _a, ...item } = JSON.parse(JSON.stringify(o));
  return item;
}

const parsed = (raw: Obj, kind: Kind) => {
  const res = parseObject(raw, kind);
  return res.ok
    ? { object: settled(res.object), notes: res.notes?.map((n) => `${n.field}: ${n.message}`) ?? [] }
    : { error: "error" in res ? res.error : "ignored" };
};

describe("protobuf reads as JSON reads", () => {
  for (const c of cases) {
    test(c.name, () => {
      const kind = c.object.kind as Kind;
      const [first, second] = throughProtobuf(c.object);
      expect(parsed(first, kind)).toEqual(parsed(throughJSON(c.object), kind));
      expect(second).toEqual(first);
      // the JSON-shaped reading too, which a Service or slice read straight into its checked object skipped
      expect(parsed(jsonShaped(c.object), kind)).toEqual(parsed(throughJSON(c.object), kind));
    });
  }

  test("every field kpng reads comes through (not merely absent on both sides)", () => {
    const s = jsonShaped(full[0]);
    expect(s.spec.ports[1].targetPort).toBe("dns");
    expect(s.spec.sessionAffinityConfig.clientIP.timeoutSeconds).toBe(300);
    expect(s.status.loadBalancer.ingress[1].ipMode).toBe("Proxy");
    expect(s.metadata.annotations.note).toBe("ü ünïcode ✓");
    expect(s.metadata.resourceVersion).toBe("7");
    expect(s.metadata.managedFields).toBeUndefined();
    const e = jsonShaped(full[1]);
    expect(e.endpoints[0]).toEqual({
      addresses: ["10.1.0.1", "10.1.0.2"],
      conditions: { ready: false, serving: true, terminating: true },
      hostname: "h",
      nodeName: "node-1",
      zone: "zone-a",
      hints: { forZones: [{ name: "zone-a" }, { name: "zone-b" }], forNodes: [{ name: "node-1" }] },
      targetRef: { kind: "Pod", name: "p", namespace: "ns" },
    });
    expect(e.ports).toEqual([{ name: "http", protocol: "TCP", port: 8080 }, { name: "", port: 53, protocol: "UDP" }, { name: "all" }]);
    const n = jsonShaped(full[2]);
    expect(n.metadata.deletionTimestamp).toBe("2026-01-02T03:04:05Z");
    expect(n.spec.taints.map((t: Obj) => t.key)).toEqual(["ToBeDeletedByClusterAutoscaler", "x"]);
  });

  test("zero values Go's JSON leaves out (omitempty) are left out; those it keeps are kept", () => {
    const [s] = throughProtobuf({ kind: "Service", metadata: { name: "z" }, spec: { ports: [{ port: 80 }] } });
    expect(s.spec).toEqual({ ports: [{ port: 80, targetPort: 0 }] });
    const [e] = throughProtobuf({
      kind: "EndpointSlice",
      metadata: { name: "z" },
      addressType: "",
      endpoints: [{ addresses: ["10.0.0.1"], hostname: "" }],
    });
    expect(e.addressType).toBe("");
    expect(e.endpoints[0].hostname).toBe("");
  });
});

describe("bad bytes", () => {
  const body = encodeList(
    "EndpointSlice",
    fixtures.filter((o) => o.kind === "EndpointSlice").map((o) => encodeItem("EndpointSlice", o)),
    { resourceVersion: "5", continue: "next" },
  );

  test("a body cut anywhere is an error for the answer, never a crash", () => {
    // (the last 4 bytes are Unknown's empty contentEncoding and contentType: optional, a body may end without them)
    for (let cut = 0; cut < body.length - 4; cut++) {
      const d = new ListDecoder("EndpointSlice");
      expect(() => {
        d.push(body.subarray(0, cut));
        d.end();
      }).toThrow(ProtoError);
    }
  });

  test("a changed byte anywhere: an error for the answer or for that object (named when its metadata reads), never a crash", () => {
    let perObject = 0;
    for (let at = 0; at < body.length; at++) {
      for (const value of [0x00, 0xff, body[at] ^ 0x08]) {
        const bad = Uint8Array.from(body);
        bad[at] = value;
        const d = new ListDecoder("EndpointSlice");
        try {
          const items = d.push(bad);
          d.end();
          for (const it of items) if (UNDECODABLE in it) perObject++;
        } catch (err) {
          expect(err).toBeInstanceOf(ProtoError);
        }
      }
    }
    expect(perObject).toBeGreaterThan(0);
  });

  test("an object whose bytes do not decode is refused by name, its neighbours read", () => {
    const good = encodeItem("Service", fixtures[0]);
    // metadata intact, then a field whose length runs past the object's end
    const broken = Uint8Array.from([
      ...encodeItem("Service", { kind: "Service", metadata: { name: "broken", namespace: "ns" }, spec: {} }).slice(0, -2),
      0x12,
      0x7f,
    ]);
    const d = new ListDecoder("Service");
    const items = d.push(encodeList("Service", [good, broken, good], { resourceVersion: "1" }));
    d.end();
    expect(items).toHaveLength(3);
    expect(items[1].metadata).toEqual({ name: "broken", namespace: "ns" });
    expect(String(items[1][UNDECODABLE])).toContain("past the end");
    expect(parseObject(items[0], "Service").ok).toBe(true);
  });

  test("a time past what a Date holds refuses that object, not the answer", () => {
    // Node { metadata { name "far", deletionTimestamp { seconds 1e17 } } }, then a well-formed Node
    const varint = (n: number) => {
      const out: number[] = [];
      for (; n >= 0x80; n = Math.floor(n / 128)) out.push((n % 128) | 0x80);
      return [...out, n];
    };
    const ts = [8, ...varint(1e17)];
    const meta = [10, 3, ...Buffer.from("far"), 74, ts.length, ...ts];
    const far = Uint8Array.from([10, meta.length, ...meta]);
    const body = encodeList("Node", [far, encodeItem("Node", full[2])], { resourceVersion: "1" });
    const d = new ListDecoder("Node");
    const items = d.push(body);
    d.end();
    expect(items.length).toBe(2);
    expect(items[0][UNDECODABLE]).toContain("time out of range");
    expect(parseObject(items[1], "Node").ok).toBe(true);
  });

  test("no k8s\\0 prefix: not a Kubernetes protobuf answer", () => {
    expect(() => new ListDecoder("Service").push(new TextEncoder().encode('{"kind":"ServiceList"}'))).toThrow("no k8s");
  });
});

describe("watch frames", () => {
  test("events decode as frames complete, across chunk boundaries, with kind and apiVersion", () => {
    const frames = Buffer.concat([
      encodeWatchEvent("ADDED", "Service", fixtures[0]),
      encodeWatchEvent("ADDED", "Node", full[2]),
      encodeWatchEvent("BOOKMARK", "Service", { kind: "Service", metadata: { resourceVersion: "42" } }),
      encodeWatchEvent("ERROR", "Status", { kind: "Status", status: "Failure", reason: "Expired", message: "too old", code: 410 }),
    ]);
    const d = new WatchDecoder();
    const events = [];
    for (let i = 0; i < frames.length; i += 5) events.push(...d.push(frames.subarray(i, i + 5)));
    expect(events.map((e) => e.type)).toEqual(["ADDED", "ADDED", "BOOKMARK", "ERROR"]);
    // a well-formed Service: its checked object, with what the reflector reads of it
    expect(events[0].object).toBeInstanceOf(Checked);
    expect(events[0].object.kind).toBe("Service");
    expect(events[0].object.metadata).toEqual({ name: "web", namespace: "default", resourceVersion: "" });
    expect(parsed(events[0].object, "Service")).toEqual(parsed(throughJSON(fixtures[0]), "Service"));
    expect(events[1].object.kind).toBe("Node");
    expect(events[1].object.apiVersion).toBe("v1");
    expect((events[2].object.metadata as Obj).resourceVersion).toBe("42");
    expect(events[3].object).toMatchObject({ kind: "Status", code: 410, reason: "Expired", message: "too old" });
  });

  test("frames and list items cut as the API server sends them (2 KB chunks, slices of ~2 KB) decode as one push does, each object intact after the frames that follow it", () => {
    // 200 slices of a different size each (1-15 endpoints): frames of 0.3-2.5 KB, most spanning two chunks or three
    const slices = Array.from({ length: 200 }, (_, i) => ({
      kind: "EndpointSlice",
      apiVersion: "discovery.k8s.io/v1",
      metadata: { name: `web-${i}`, namespace: "default", labels: { "kubernetes.io/service-name": `web-${i}` } },
      addressType: "IPv4",
      endpoints: Array.from({ length: 1 + (i % 15) }, (_, j) => ({ addresses: [`10.0.${i}.${j + 1}`], nodeName: `node-${j}` })),
      ports: [{ name: "http", port: 8080, protocol: "TCP" }],
    }));
    const frames = slices.map((o) => encodeWatchEvent("ADDED", "EndpointSlice", o));
    const listItems = slices.map((o) => encodeItem("EndpointSlice", o));
    const whole = new WatchDecoder().push(Buffer.concat(frames)).map((e) => parsed(e.object, "EndpointSlice"));
    // Byte by byte and by 3s over the first 30 slices: every cut of every one of the 15 frame
    // sizes; by the API server's 2-4 KB chunks over all 200. (All 200 byte by byte, 300,000
    // pushes, was most of this file's CPU and cut nothing the first 30 do not.)
    for (const [size, n] of [
      [1, 30],
      [3, 30],
      [2048, 200],
      [1949, 200],
      [4096, 200],
    ]) {
      const stream = Buffer.concat(frames.slice(0, n));
      // the same objects as one List (a page): its decoder keeps the unfinished item between chunks the same way
      const page = encodeList("EndpointSlice", listItems.slice(0, n), { resourceVersion: "9" });
      const d = new WatchDecoder();
      const events = [];
      for (let i = 0; i < stream.length; i += size) events.push(...d.push(stream.subarray(i, i + size)));
      // read only now, after every later frame went through the decoder
      expect(events.map((e) => parsed(e.object, "EndpointSlice"))).toEqual(whole.slice(0, n));
      const l = new ListDecoder("EndpointSlice");
      const items = [];
      for (let i = 0; i < page.length; i += size) items.push(...l.push(page.subarray(i, i + size)));
      l.end();
      expect(items.map((o) => parsed(o, "EndpointSlice"))).toEqual(whole.slice(0, n));
    }
    expect(whole).toHaveLength(200);
  });

  test("a frame with bad bytes comes back marked undecodable, and the frames after it decode (its length was sound)", () => {
    const frame = encodeWatchEvent("ADDED", "Service", fixtures[0]);
    frame[Buffer.from(frame).indexOf("k8s\0") + 1] ^= 0xff; // the object's own k8s\0 prefix
    const cut = encodeWatchEvent("ADDED", "Service", fixtures[0]);
    cut[5] = 0x7f; // the type's length runs past the frame
    const good = encodeWatchEvent("MODIFIED", "Service", fixtures[0]);
    const events = new WatchDecoder().push(Buffer.concat([frame, cut, good]));
    expect(events.map((e) => [e.type, e.undecodable])).toEqual([
      ["", "not a Kubernetes protobuf body (no k8s\\0 prefix)"],
      ["", expect.stringMatching(/./)],
      ["MODIFIED", undefined],
    ]);
  });

  test("a frame length no frame can have is a framing error: it throws (nothing after it can be trusted)", () => {
    expect(() => new WatchDecoder().push(Uint8Array.of(0xff, 0xff, 0xff, 0xff, 0x0a))).toThrow(ProtoError);
  });

  test("a frame wrapped in k8s\0 + runtime.Unknown (no API server writes one) decodes as the bare event", () => {
    const bare = encodeWatchEvent("MODIFIED", "Service", fixtures[0]);
    const event = bare.subarray(4);
    const unknown = Buffer.concat([Buffer.from("k8s\0", "latin1"), Buffer.from([0x12]), varint(event.length), event]);
    const framed = Buffer.concat([Buffer.from([0, 0, 0, 0]), unknown]);
    framed.writeUInt32BE(unknown.length, 0);
    const [a] = new WatchDecoder().push(bare);
    const [b] = new WatchDecoder().push(framed);
    expect(b.type).toBe("MODIFIED");
    expect(parsed(b.object, "Service")).toEqual(parsed(a.object, "Service"));
  });
});

function varint(n: number): Buffer {
  const out: number[] = [];
  for (; n > 127; n >>>= 7) out.push((n & 127) | 128);
  out.push(n);
  return Buffer.from(out);
}
