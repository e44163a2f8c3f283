// The hand-written EndpointSlice check must accept exactly what the valibot
// schema accepts, with the same output: every field of a full slice is
// deleted or replaced by values of every JSON type (and out-of-range ones),
// and both verdicts are compared.

import { describe, expect, test } from "bun:test";
import { fastSlice } from "../../src/core/brain/k8s/fast-slice.ts";
import {
  EndpointSliceSchema,
  EndpointSliceShape,
  canonicalFirstAddresses,
  parseObject,
  type K8sEndpointSlice,
} from "../../src/core/brain/k8s/objects.ts";
import { readSlice } from "../../src/core/brain/k8s/read.ts";
import { expectReadAgrees, expectSameVerdict, expectSameVerdicts, paths } from "./differential.ts";

const full = () => ({
  kind: "EndpointSlice",
  apiVersion: "discovery.k8s.io/v1",
  metadata: {
    name: "web-abc",
    namespace: "default",
    uid: "u-1",
    labels: { "kubernetes.io/service-name": "web" },
    annotations: { a: "b" },
    managedFields: [{ manager: "x" }],
  },
  addressType: "IPv4",
  endpoints: [
    {
      addresses: ["198.19.1.5"],
      conditions: { ready: true, serving: true, terminating: false },
      hostname: "h",
      nodeName: "node-1",
      zone: "zone-a",
      hints: { forZones: [{ name: "zone-a" }], forNodes: [{ name: "node-1" }] },
      targetRef: { kind: "Pod", name: "web-1", namespace: "default", uid: "u-2" },
      deprecatedTopology: { x: "y" },
    },
  ],
  ports: [{ name: "http", protocol: "TCP", port: 8080, appProtocol: "http" }],
});

const replacements: unknown[] = [
  undefined,
  null,
  0,
  -1,
  1.5,
  70000,
  "",
  "x",
  "UDP",
  "IPv6",
  true,
  false,
  [],
  {},
  ["a"],
  [{ name: "n" }],
  "QUIC",
  "Hostname",
  "198.019.1.5",
  ["198.19.1.5"],
  ["2001:DB8::5"],
];

const sameVerdict = (raw: Record<string, unknown>) => expectSameVerdict(EndpointSliceSchema, fastSlice, raw);

describe("fastSlice agrees with EndpointSliceSchema", () => {
  test("a full valid slice: the same output, unknown fields left out", () => {
    const out = fastSlice(full());
    expect(out).not.toBeNull();
    sameVerdict(full());
    expect(JSON.stringify(out)).not.toContain("uid");
  });

  test("minimal slices: no endpoints, null lists, no ports", () => {
    for (const raw of [
      { kind: "EndpointSlice", metadata: { name: "a" }, addressType: "FQDN" },
      { kind: "EndpointSlice", metadata: { name: "a", labels: null }, addressType: "IPv6", endpoints: null, ports: null },
      {
        kind: "EndpointSlice",
        metadata: { name: "a" },
        addressType: "IPv4",
        endpoints: [{ addresses: ["x"], conditions: {} }],
        ports: [{}],
      },
    ])
      sameVerdict(raw);
  });

  const all = paths(full());
  test(`every field deleted or replaced (${all.length} fields x ${replacements.length + 1} variants)`, () => {
    const rejected = expectSameVerdicts(EndpointSliceSchema, fastSlice, full, replacements);
    expect(rejected).toBeGreaterThan(50); // the table does reach invalid inputs
  });

  test("what it takes (first addresses put as kube-proxy prints them), the shape-and-read path reads to the same object, with nothing to say", () => {
    const fastAndCanonical = (raw: Record<string, unknown>) => {
      const out = fastSlice(raw);
      return out && canonicalFirstAddresses(out) ? out : null;
    };
    expect(expectReadAgrees<K8sEndpointSlice>(EndpointSliceShape, readSlice, fastAndCanonical, full, replacements)).toBeGreaterThan(100);
  });

  test("an invalid slice still gets valibot's message", () => {
    const raw = full();
    raw.ports[0].port = 70000;
    const r = parseObject(raw);
    expect(r).toEqual({ ok: false, error: "endpointSlice default/web-abc ports[0].port: 70000 is out of range", reason: "malformed" });
  });
});
