// parseObject's slow path, one rule a case: what is refused (and why, for
// kpng_objects_dropped_total), what is skipped with a note (and whether any
// API server would have held it: the file source refuses that at start-up),
// and what is read silently. The corpus (test/fixtures/corpus) shows the
// node-local result of whole objects; this shows the verdicts.

import { describe, expect, test } from "bun:test";
import { parseObject, type K8sService } from "../../src/core/brain/k8s/objects.ts";
import { clusterIPsByFamily } from "../../src/core/brain/k8s/read.ts";

const svc = (spec: Record<string, unknown>, status?: Record<string, unknown>) => ({
  kind: "Service",
  metadata: { name: "web", namespace: "default" },
  spec: { clusterIP: "198.18.0.10", ports: [{ name: "http", port: 80 }], ...spec },
  ...(status ? { status } : {}),
});
const slice = (addressType: string, addresses: string[][], ports: unknown[] = [{ name: "http", port: 8080 }]) => ({
  kind: "EndpointSlice",
  metadata: { name: "web-x", namespace: "default", labels: { "kubernetes.io/service-name": "web" } },
  addressType,
  endpoints: addresses.map((a) => ({ addresses: a })),
  ports,
});

type Verdict = { dropped: string } | { notes: Array<[field: string, apiRejects: boolean]> };
const verdict = (raw: unknown): Verdict => {
  const r = parseObject(raw);
  if (!r.ok) return { dropped: "reason" in r ? r.reason : "ignored" };
  return { notes: (r.notes ?? []).map((n) => [n.field, n.apiRejects] as [string, boolean]) };
};

const cases: Array<{ name: string; raw: unknown; want: Verdict }> = [
  { name: "a port out of range: refused (no API server holds it)", raw: svc({ ports: [{ port: 70000 }] }), want: { dropped: "malformed" } },
  { name: "a name where a number goes: refused", raw: svc({ ports: [{ port: "80" }] }), want: { dropped: "malformed" } },
  {
    name: "a cluster IP that is no IP: refused, no cluster IP to serve",
    raw: svc({ clusterIP: "10.0.0.300" }),
    want: { dropped: "invalid_cluster_ip" },
  },
  { name: "a cluster IP with leading zeros: read, nothing said", raw: svc({ clusterIP: "198.018.0.10" }), want: { notes: [] } },
  { name: "headless and unallocated cluster IPs: read, nothing said", raw: svc({ clusterIP: "None" }), want: { notes: [] } },
  {
    name: "a clusterIPs entry that is no IP: skipped",
    raw: svc({ clusterIPs: ["198.18.0.10", "x"], ipFamilies: ["IPv4", "IPv6"] }),
    want: { notes: [["spec.clusterIPs[1]", true]] },
  },
  {
    name: "an unknown ipFamilies value: said, never served",
    raw: svc({ clusterIPs: ["198.18.0.10"], ipFamilies: ["IPv4", "IPv7"] }),
    want: { notes: [["spec.ipFamilies[1]", false]] },
  },
  {
    name: "an external IP that is no IP: skipped",
    raw: svc({ externalIPs: ["198.18.64.1", ""] }),
    want: { notes: [["spec.externalIPs[1]", true]] },
  },
  {
    name: "a source range with spaces and host bits: read, nothing said",
    raw: svc({ loadBalancerSourceRanges: ["  198.18.128.9/24"] }),
    want: { notes: [] },
  },
  {
    name: "a source range that is no CIDR: skipped",
    raw: svc({ loadBalancerSourceRanges: ["198.18.128.0/24", "198.18.128.0/40"] }),
    want: { notes: [["spec.loadBalancerSourceRanges[1]", true]] },
  },
  {
    name: "an unknown type: said (a newer API server may hold it)",
    raw: svc({ type: "Gateway" }),
    want: { notes: [["spec.type", false]] },
  },
  {
    name: "an unknown protocol: the port skipped, said",
    raw: svc({ ports: [{ port: 80, protocol: "QUIC" }] }),
    want: { notes: [["spec.ports[0].protocol", false]] },
  },
  {
    name: "unknown affinity and policies: said",
    raw: svc({ sessionAffinity: "Cookie", externalTrafficPolicy: "Near", internalTrafficPolicy: "Near" }),
    want: {
      notes: [
        ["spec.sessionAffinity", false],
        ["spec.externalTrafficPolicy", false],
        ["spec.internalTrafficPolicy", false],
      ],
    },
  },
  {
    name: "externalTrafficPolicy Global (1.5-1.6): read as Cluster, nothing said",
    raw: svc({ externalTrafficPolicy: "Global" }),
    want: { notes: [] },
  },
  {
    name: 'targetPort 0 and "" (defaulted by API servers to the port): read, nothing said',
    raw: svc({
      ports: [
        { port: 80, targetPort: 0 },
        { name: "b", port: 81, targetPort: "" },
      ],
    }),
    want: { notes: [] },
  },
  {
    name: "an ingress IP that is no IP: skipped",
    raw: svc({}, { loadBalancer: { ingress: [{ ip: "x" }, { ip: "198.18.64.2" }] } }),
    want: { notes: [["status.loadBalancer.ingress[0].ip", true]] },
  },
  {
    name: "an unknown ipMode: said",
    raw: svc({}, { loadBalancer: { ingress: [{ ip: "198.18.64.2", ipMode: "Tunnel" }] } }),
    want: { notes: [["status.loadBalancer.ingress[0].ipMode", false]] },
  },
  { name: "an unknown addressType: said, the slice not read", raw: slice("IPv7", [["x"]]), want: { notes: [["addressType", false]] } },
  { name: "FQDN slices: kept, not read, nothing said", raw: slice("FQDN", [["a.example"]]), want: { notes: [] } },
  {
    name: "an endpoint without addresses: skipped",
    raw: slice("IPv4", [[], ["198.19.1.1"]]),
    want: { notes: [["endpoints[0].addresses[0]", true]] },
  },
  {
    name: "an endpoint address of the other family: skipped",
    raw: slice("IPv6", [["198.19.1.1"]]),
    want: { notes: [["endpoints[0].addresses[0]", true]] },
  },
  { name: "only the first address is read: a bad second one says nothing", raw: slice("IPv4", [["198.19.1.1", "x"]]), want: { notes: [] } },
  {
    name: "an unknown slice port protocol: the port skipped, said",
    raw: slice("IPv4", [["198.19.1.1"]], [{ name: "http", port: 8080, protocol: "QUIC" }]),
    want: { notes: [["ports[0].protocol", false]] },
  },
];

describe("reading an object kube-proxy's way: refused, skipped, said", () => {
  for (const c of cases) test(c.name, () => expect(verdict(c.raw)).toEqual(c.want));
});

test("a read Service carries the values as kube-proxy programs them", () => {
  const r = parseObject(
    svc({
      clusterIP: "198.018.000.010",
      clusterIPs: ["198.018.000.010"],
      externalIPs: ["::FFFF:198.18.64.1"],
      loadBalancerSourceRanges: [" 198.18.128.9/24 "],
    }),
  );
  expect(r.ok).toBe(true);
  const spec = (r as { object: K8sService }).object.spec;
  expect([spec.clusterIP, spec.clusterIPs, spec.externalIPs, spec.loadBalancerSourceRanges]).toEqual([
    "198.18.0.10",
    ["198.18.0.10"],
    ["198.18.64.1"],
    ["198.18.128.0/24"],
  ]);
});

test("clusterIPs are read even without a clusterIP: no entry that is no IP reaches the model", () => {
  const r = parseObject(svc({ clusterIP: undefined, clusterIPs: ["x"], ipFamilies: ["IPv4"] }));
  expect(r.ok && (r.object as K8sService).spec.clusterIPs).toEqual([]);
});

describe("clusterIPsByFamily: the cluster IP of each family, as kube-proxy's GetClusterIPByFamily", () => {
  const A4 = "198.18.0.10";
  const B4 = "198.18.0.11";
  const A6 = "fd00:10:96::a";
  const cases: Array<{ name: string; spec: Parameters<typeof clusterIPsByFamily>[0]; want: string[] }> = [
    { name: "clusterIP alone", spec: { clusterIP: A4 }, want: [A4] },
    { name: "clusterIPs by ipFamilies, v6 first", spec: { clusterIPs: [A6, A4], ipFamilies: ["IPv6", "IPv4"] }, want: [A4, A6] },
    { name: "an entry of another family than its index says: not taken", spec: { clusterIPs: [A6], ipFamilies: ["IPv4"] }, want: [] },
    { name: "a family not in ipFamilies: not served", spec: { clusterIPs: [A4, A6], ipFamilies: ["IPv4"] }, want: [A4] },
    { name: "without ipFamilies: the first of each family", spec: { clusterIPs: ["None", B4, A6, A4] }, want: [B4, A6] },
    { name: "headless", spec: { clusterIP: "None", clusterIPs: ["None"], ipFamilies: ["IPv4"] }, want: [] },
    { name: "clusterIPs empty: clusterIP", spec: { clusterIP: A6, clusterIPs: [] }, want: [A6] },
    { name: "nothing allocated", spec: {}, want: [] },
  ];
  for (const c of cases) test(c.name, () => expect(clusterIPsByFamily(c.spec)).toEqual(c.want));
});
