// The hand-written Service check must accept exactly what the valibot schema
// accepts, with the same output: every field of a full service is deleted or
// replaced by values of every JSON type (and addresses, ranges and names of
// every kind the schema tells apart), and both verdicts are compared.

import { describe, expect, test } from "bun:test";
import { fastService } from "../../src/core/brain/k8s/fast-service.ts";
import { ServiceSchema, ServiceShape, parseObject, type K8sService } from "../../src/core/brain/k8s/objects.ts";
import { readService } from "../../src/core/brain/k8s/read.ts";
import { expectReadAgrees, expectSameVerdict, expectSameVerdicts, paths } from "./differential.ts";

const full = () => ({
  kind: "Service",
  apiVersion: "v1",
  metadata: {
    name: "web",
    namespace: "default",
    uid: "u-1",
    labels: { app: "web" },
    annotations: { a: "b" },
    managedFields: [{ manager: "x" }],
  },
  spec: {
    type: "LoadBalancer",
    clusterIP: "198.18.0.10",
    clusterIPs: ["198.18.0.10", "2001:db8:1::10"],
    ipFamilies: ["IPv4", "IPv6"],
    ipFamilyPolicy: "PreferDualStack",
    externalIPs: ["198.18.64.1"],
    loadBalancerSourceRanges: ["198.18.128.0/24"],
    ports: [
      { name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: 30080, appProtocol: "http" },
      { name: "dns", protocol: "UDP", port: 53, targetPort: "dns" },
    ],
    selector: { app: "web" },
    sessionAffinity: "ClientIP",
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
    externalTrafficPolicy: "Local",
    internalTrafficPolicy: "Cluster",
    healthCheckNodePort: 31000,
  },
  status: { loadBalancer: { ingress: [{ ip: "198.18.64.2", hostname: "lb.example", ipMode: "VIP", ports: [] }] } },
});

const replacements: unknown[] = [
  ...[undefined, null, true, false, [], {}, ["a"], [{ name: "n" }], [{ port: 80 }]],
  ...[0, -1, 1.5, 1, 65535, 65536, 86400, 86401, NaN, Infinity],
  ...["", "x", "None", "TCP", "SCTP", "tcp", "IPv4", "IPv6", "ClientIP", "Local", "Cluster", "NodePort", "ExternalName", "Proxy", "VIP"],
  ...[
    "198.18.0.1",
    "2001:db8::1",
    "01.2.3.4",
    "fe80::1%eth0",
    "198.18.0.0/15",
    "2001:db8::/129",
    ["198.18.0.1"],
    ["None"],
    ["IPv6"],
    ["198.18.0.0/16"],
  ],
  // what the fast path leaves to read.ts: addresses not as kube-proxy prints them, values it does not know
  ...[
    "2001:DB8::1",
    "2001:db8:0:0:0:0:0:1",
    "::ffff:198.18.0.1",
    "198.18.0.1/8",
    " 198.18.0.0/16",
    "198.18.0.0/016",
    "Global",
    "QUIC",
    "Tunnel",
    0,
  ],
];

const sameVerdict = (raw: Record<string, unknown>) => expectSameVerdict(ServiceSchema, fastService, raw);

describe("fastService agrees with ServiceSchema", () => {
  test("a full valid service: the same output, unknown fields left out", () => {
    const out = fastService(full());
    expect(out).not.toBeNull();
    sameVerdict(full());
    expect(JSON.stringify(out)).not.toContain("uid");
  });

  test("minimal services: defaults filled in, null lists kept", () => {
    for (const raw of [
      { kind: "Service", metadata: { name: "a" }, spec: {} },
      { kind: "Service", metadata: { name: "a", labels: null }, spec: { clusterIPs: null, ports: null, externalIPs: null }, status: {} },
      {
        kind: "Service",
        metadata: { name: "a" },
        spec: { clusterIP: "", ports: [{ port: 1 }] },
        status: { loadBalancer: { ingress: null } },
      },
      {
        kind: "Service",
        metadata: { name: "a" },
        spec: { type: undefined, sessionAffinityConfig: {}, ports: [{ port: 1, protocol: undefined }] },
      },
    ])
      sameVerdict(raw);
  });

  const all = paths(full());
  test(`every field deleted or replaced (${all.length} fields x ${replacements.length + 1} variants)`, () => {
    const rejected = expectSameVerdicts(ServiceSchema, fastService, full, replacements);
    expect(rejected).toBeGreaterThan(500); // the table does reach invalid inputs
  });

  test("what it takes, the shape-and-read path reads to the same object, with nothing to say", () => {
    expect(expectReadAgrees<K8sService>(ServiceShape, readService, fastService, full, replacements)).toBeGreaterThan(200);
  });

  test("a list item (no kind) parses as its list's kind, to the same object", () => {
    const { kind: _, ...item } = full();
    expect(parseObject(item, "Service")).toStrictEqual(parseObject(full()));
    expect(parseObject({ ...item, kind: "Other" }, "Service")).toStrictEqual(parseObject(full()));
  });

  test("an invalid service still gets valibot's message, also as a list item", () => {
    const raw = full();
    raw.spec.ports[0].port = 70000;
    const want = {
      ok: false as const,
      error: "service default/web spec.ports[0].port: 70000 is out of range",
      reason: "malformed" as const,
    };
    expect(parseObject(raw)).toEqual(want);
    const { kind: _, ...item } = raw;
    expect(parseObject(item, "Service")).toEqual(want);
  });
});
