// The pure renderer: per-service objects for each rule of the Service
// semantics, the fixed skeleton from Config, and one golden full sync.
// UPDATE_GOLDEN=1 rewrites the golden file after a deliberate change.

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { dispatchChainSpec, familyConfig, renderBase } from "../../plugins/nft/render-base.ts";
import { listElements, renderService, type ServiceObjects } from "../../plugins/nft/render-service.ts";
import { hash8, type TableFamily } from "../../plugins/nft/names.ts";
import { printOp } from "../../plugins/nft/transaction.ts";
import type { Config } from "../../src/core/config/config.ts";
import type { Endpoint } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { context, entry, ep, key, nodeConfig, nodeState, svc, type SvcSpec } from "./fixtures.ts";

/** one line per object, names without their hash: "chain NAME: RULE", "element SET KEY : VALUE", "set NAME", "shared CHAIN" */
function lines(o: ServiceObjects): string[] {
  return [
    ...o.sets.map((s) => `set ${s.name} timeout ${s.timeout}`),
    ...o.shared.map((s) => `shared ${s.name}`),
    ...o.chains.flatMap((c) => c.rules.map((r) => `chain ${c.name}: ${r.rule}`)),
    ...[...o.elements, ...o.lists.flatMap((l) => (l ? listElements(l) : []))].map(
      (e) => `element ${e.set} ${e.key}${e.value !== undefined ? ` : ${e.value}` : ""}`,
    ),
  ].map((l) => l.replace(/-[A-Z2-7]{8}-/g, "-"));
}

function render(spec: SvcSpec, eps: Record<string, Endpoint>, family: TableFamily = "ip", config: Partial<Config> = {}) {
  const s = svc(spec);
  let slot = 0;
  return renderService(key(s), s, new Map(Object.entries(eps)), familyConfig(nodeConfig(config), family), () => slot++);
}

const cip = v4.clusterIP(1);
const lb = v4.external(1);
const web = (over: Partial<SvcSpec> = {}): SvcSpec => ({
  name: "web",
  clusterIPs: [cip, v6.clusterIP(1)],
  ports: [{ name: "http", port: 80, nodePort: 30080 }],
  ...over,
});
const pod = (i: number, o: Partial<Parameters<typeof ep>[0]> = {}) =>
  ep({ ips: [v4.pod(0, i), v6.pod(0, i)], ports: { http: 8080 }, ...o });

interface Case {
  name: string;
  spec: SvcSpec;
  eps: Record<string, Endpoint>;
  family?: TableFamily;
  config?: Partial<Config>;
  has?: string[];
  hasNot?: RegExp[];
}

const cases: Case[] = [
  {
    name: "cluster IP with endpoints: no chain of its own, the shared chain of its port index and endpoint count",
    spec: web(),
    eps: { a: pod(1), b: pod(2) },
    has: [
      "shared dispatch-tcp-port0-2",
      "element service-ips 198.18.0.1 . tcp . 80 : goto dispatch-tcp-port0-2",
      "element cluster-endpoints-tcp 198.18.0.1 . 0 : 198.19.0.1",
      "element cluster-endpoints-tcp 198.18.0.1 . 1 : 198.19.0.2",
      "element cluster-target-ports-tcp 198.18.0.1 . 80 : 8080",
      "element cluster-ips 198.18.0.1",
    ],
    hasNot: [/^chain svc-/],
  },
  {
    name: "a service's second port takes the second range of indexes",
    spec: web({
      ports: [
        { name: "http", port: 80 },
        { name: "https", port: 443, targetPort: 8443 },
      ],
    }),
    eps: { a: pod(1), b: pod(2) },
    has: [
      "element service-ips 198.18.0.1 . tcp . 443 : goto dispatch-tcp-port1-2",
      "element cluster-endpoints-tcp 198.18.0.1 . 16384 : 198.19.0.1",
      "element cluster-endpoints-tcp 198.18.0.1 . 16385 : 198.19.0.2",
      "element cluster-target-ports-tcp 198.18.0.1 . 443 : 8443",
    ],
  },
  {
    name: "endpoints with different target ports: a chain of its own, DNAT through its slot",
    spec: web(),
    eps: { a: pod(1), b: pod(2, { ports: { http: 9090 } }) },
    has: [
      "element service-ips 198.18.0.1 . tcp . 80 : goto svc-default/web/tcp/http",
      "chain svc-default/web/tcp/http: meta l4proto tcp dnat ip to numgen random mod 2 offset 0 map @endpoints-tcp-000",
      "element endpoints-tcp-000 0 : 198.19.0.1 . 8080",
      "element endpoints-tcp-000 1 : 198.19.0.2 . 9090",
    ],
    hasNot: [/cluster-endpoints/, /cluster-target-ports/],
  },
  {
    name: "a single endpoint of an external entry is DNATed directly, without a slot",
    spec: web(),
    eps: { a: pod(1) },
    has: ["chain ext-default/web/tcp/http: meta l4proto tcp dnat to 198.19.0.1:8080", "shared dispatch-tcp-port0-1"],
    hasNot: [/endpoints-tcp-\d/],
  },
  {
    name: "target port: the endpoint's port of the same name, else targetPort, else port",
    spec: web({
      ports: [
        { name: "http", port: 80 },
        { name: "t", port: 81, targetPort: 9081 },
        { name: "p", port: 82 },
      ],
    }),
    eps: { a: pod(1) },
    has: [
      "element cluster-target-ports-tcp 198.18.0.1 . 80 : 8080",
      "element cluster-target-ports-tcp 198.18.0.1 . 81 : 9081",
      "element cluster-target-ports-tcp 198.18.0.1 . 82 : 82",
    ],
  },
  {
    name: "no endpoints: every frontend rejected",
    spec: web({ lbIPs: [lb] }),
    eps: {},
    has: [
      "element no-endpoint-services 198.18.0.1 . tcp . 80 : goto reject-chain",
      "element no-endpoint-services 198.18.64.1 . tcp . 80 : goto reject-chain",
      "element no-endpoint-nodeports tcp . 30080 : goto reject-chain",
    ],
    hasNot: [/^chain /, /service-ips/],
  },
  {
    name: "iTP=Local without an Internal endpoint: cluster IP traffic dropped",
    spec: web({ iTPLocal: true }),
    eps: { a: pod(1, { internal: false, local: false }) },
    has: [
      "element no-endpoint-services 198.18.0.1 . tcp . 80 : drop",
      "element service-nodeports tcp . 30080 : goto ext-default/web/tcp/http",
    ],
  },
  {
    name: "eTP=Local without an External endpoint: outside traffic dropped, short-circuits kept",
    spec: web({ eTPLocal: true, lbIPs: [lb] }),
    eps: { a: pod(1, { external: false, local: false }) },
    has: [
      "chain ext-default/web/tcp/http: ip saddr 198.19.0.0/16 goto svc-default/web/tcp/http",
      "chain ext-default/web/tcp/http: fib saddr type local jump mark-for-masquerade",
      "chain ext-default/web/tcp/http: fib saddr type local goto svc-default/web/tcp/http",
      "element service-ips 198.18.64.1 . tcp . 80 : goto ext-default/web/tcp/http",
      "element no-endpoint-services 198.18.64.1 . tcp . 80 : drop",
      "element no-endpoint-nodeports tcp . 30080 : drop",
    ],
    hasNot: [/chain ext.*dnat/],
  },
  {
    name: "eTP=Local, detectLocalMode BridgeInterface: pod traffic short-circuits by its input interface",
    spec: web({ eTPLocal: true, lbIPs: [lb] }),
    eps: { a: pod(1, { external: false, local: false }) },
    config: { localDetect: { kind: "bridge", iface: "cbr0" } },
    has: ['chain ext-default/web/tcp/http: iifname "cbr0" goto svc-default/web/tcp/http'],
    hasNot: [/saddr 198\.19/],
  },
  {
    name: "eTP=Local, detectLocalMode InterfaceNamePrefix: pod traffic short-circuits by the interface name's prefix",
    spec: web({ eTPLocal: true, lbIPs: [lb] }),
    eps: { a: pod(1, { external: false, local: false }) },
    config: { localDetect: { kind: "prefix", prefix: "cali" } },
    has: ['chain ext-default/web/tcp/http: iifname "cali*" goto svc-default/web/tcp/http'],
  },
  {
    name: "Scopes obeyed: an Internal-only endpoint is not used for external traffic",
    spec: web({ eTPLocal: true }),
    eps: { a: pod(1), b: pod(2, { external: false, local: false }) },
    has: [
      "chain svc-default/web/tcp/http: meta l4proto tcp dnat ip to numgen random mod 2 offset 0 map @endpoints-tcp-000",
      "chain ext-default/web/tcp/http: meta l4proto tcp dnat to 198.19.0.1:8080",
    ],
    hasNot: [/: jump mark-for-masquerade$/],
  },
  {
    name: "eTP=Cluster: external traffic masqueraded",
    spec: web({ externalIPs: [v4.external(2)] }),
    eps: { a: pod(1) },
    has: [
      "chain ext-default/web/tcp/http: jump mark-for-masquerade",
      "element service-ips 198.18.64.2 . tcp . 80 : goto ext-default/web/tcp/http",
    ],
  },
  {
    name: "loadBalancerSourceRanges: a firewall chain for the LB IPs only",
    spec: web({ lbIPs: [lb], externalIPs: [v4.external(2)], sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"] }),
    eps: { a: pod(1) },
    has: [
      "chain fw-default/web/0: ip saddr != 198.18.128.0/24 drop",
      "element firewall-ips 198.18.64.1 . tcp . 80 : goto fw-default/web/0",
    ],
    hasNot: [/firewall-ips 198.18.64.2/, /firewall-ips 198.18.0.1/],
  },
  {
    name: "ClientIP affinity: a chain and a timed set per endpoint, default timeout 3 h",
    spec: web({ affinitySeconds: 0 }),
    eps: { a: pod(1), b: pod(2) },
    has: [
      "set aff-default/web/tcp/http__198.19.0.1/8080 timeout 10800",
      "chain ep-default/web/tcp/http__198.19.0.1/8080: update @aff-default/web/tcp/http__198.19.0.1/8080 { ip saddr }",
      "chain svc-default/web/tcp/http: ip saddr @aff-default/web/tcp/http__198.19.0.1/8080 goto ep-default/web/tcp/http__198.19.0.1/8080",
      "chain ep-default/web/tcp/http__198.19.0.1/8080: meta l4proto tcp dnat to 198.19.0.1:8080",
      "chain svc-default/web/tcp/http: numgen random mod 2 offset 0 vmap @endpoint-chains-000",
    ],
  },
  {
    name: "hairpin pairs only for endpoints on this node",
    spec: web(),
    eps: { a: pod(1), b: pod(2, { local: false }) },
    has: ["element hairpin 198.19.0.1 . 198.19.0.1"],
    hasNot: [/hairpin 198.19.0.2/],
  },
  {
    name: "IPv6 family: the v6 addresses of the same service",
    spec: web(),
    eps: { a: pod(1) },
    family: "ip6",
    has: [
      "element service-ips 2001:db8:1::1 . tcp . 80 : goto dispatch-tcp-port0-1",
      "element cluster-endpoints-tcp 2001:db8:1::1 . 0 : 2001:db8:2:0::1",
      "chain ext-default/web/tcp/http: meta l4proto tcp dnat to [2001:db8:2:0::1]:8080",
    ],
  },
  {
    name: "single-stack IPv4 service: nothing in ip6",
    spec: web({ clusterIPs: [cip] }),
    eps: { a: pod(1) },
    family: "ip6",
    hasNot: [/./],
  },
  {
    name: "invalid addresses and ports are ignored",
    spec: web({
      clusterIPs: [cip, "198.18.0.300"],
      externalIPs: ["not-an-ip"],
      ports: [
        { name: "http", port: 80 },
        { name: "x", port: 70000 },
      ],
    }),
    eps: { a: ep({ ips: ["198.19.0.999"] }), b: pod(2) },
    hasNot: [/300/, /not-an-ip/, /999/, /70000/],
    has: ["element cluster-endpoints-tcp 198.18.0.1 . 0 : 198.19.0.2"],
  },
  {
    name: "no node port addresses in the family: no node port",
    spec: web(),
    eps: { a: pod(1) },
    config: { nodeIPs: [], nodePortAddresses: [] },
    hasNot: [/nodeports/],
  },
  {
    name: "UDP and SCTP use their own DNAT maps",
    spec: web({
      ports: [
        { name: "dns", protocol: "UDP", port: 53 },
        { name: "s", protocol: "SCTP", port: 90 },
      ],
    }),
    eps: { a: pod(1, { ports: { dns: 5353, s: 9000 } }), b: pod(2, { ports: { dns: 5353, s: 9000 } }) },
    has: [
      "element service-ips 198.18.0.1 . udp . 53 : goto dispatch-udp-port0-2",
      "element cluster-endpoints-udp 198.18.0.1 . 0 : 198.19.0.1",
      "element cluster-target-ports-udp 198.18.0.1 . 53 : 5353",
      "element service-ips 198.18.0.1 . sctp . 90 : goto dispatch-sctp-port1-2",
      "element cluster-endpoints-sctp 198.18.0.1 . 16385 : 198.19.0.2",
      "element cluster-target-ports-sctp 198.18.0.1 . 90 : 9000",
    ],
  },
];

describe("nft renderService", () => {
  for (const c of cases)
    test(c.name, () => {
      const got = lines(render(c.spec, c.eps, c.family, c.config));
      for (const h of c.has ?? []) expect(got).toContain(h);
      for (const re of c.hasNot ?? []) expect(got.filter((l) => re.test(l))).toEqual([]);
    });

  test("UDP frontends name the endpoints each one is DNATed to", () => {
    const o = render(web({ ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 30053 }], lbIPs: [lb] }), {
      a: pod(1, { ports: { dns: 5353 } }),
      b: pod(2, { ports: { dns: 5353 }, external: false }),
    });
    expect(o.udp).toEqual([
      { ip: cip, family: 4, port: 53, endpoints: ["198.19.0.1:5353", "198.19.0.2:5353"] },
      { ip: lb, family: 4, port: 53, endpoints: ["198.19.0.1:5353"] },
      { family: 4, port: 30053, endpoints: ["198.19.0.1:5353"] },
    ]);
  });
});

describe("nft renderBase", () => {
  const base = (config: Partial<Config>, family: TableFamily = "ip") => renderBase(familyConfig(nodeConfig(config), family)).map(printOp);
  const cases: { name: string; config: Partial<Config>; family?: TableFamily; has: string[]; hasNot?: RegExp[] }[] = [
    { name: "node ports answer on the node IPs by default", config: {}, has: ["add element ip kpng nodeport-ips { 203.0.113.10 }"] },
    {
      name: "'primary' means the node IPs too",
      config: { nodePortAddresses: ["primary"] },
      family: "ip6",
      has: ["add element ip6 kpng nodeport-ips { 2001:db8:3::a }"],
    },
    {
      name: "nodePortAddresses CIDRs of the family",
      config: { nodePortAddresses: ["203.0.113.0/24", "2001:db8:3::/64"] },
      has: ["add element ip kpng nodeport-ips { 203.0.113.0/24 }"],
      hasNot: [/nodeport-ips \{ 2001/],
    },
    { name: "never loopback", config: {}, has: ["ip daddr != 127.0.0.0/8 ip daddr @nodeport-ips fib daddr type local"] },
    {
      name: "masquerade bit from Config",
      config: { masqueradeBit: 5 },
      has: ["add rule ip kpng mark-for-masquerade meta mark set meta mark | 0x20"],
    },
    {
      name: "off-cluster sources masqueraded to cluster IPs",
      config: {},
      has: [
        'add rule ip kpng services ip daddr @cluster-ips ip saddr != 198.19.0.0/16 jump mark-for-masquerade comment "masquerade off-cluster traffic to cluster IPs"',
      ],
    },
    {
      name: "masqueradeAll",
      config: { masqueradeAll: true },
      has: ['add rule ip kpng services ip daddr @cluster-ips jump mark-for-masquerade comment "masquerade all traffic to cluster IPs"'],
    },
    {
      name: "detectLocalMode BridgeInterface: traffic not from the bridge masqueraded (kube-proxy's iifname match)",
      config: { localDetect: { kind: "bridge", iface: "cbr0" } },
      family: "ip6",
      has: ['add rule ip6 kpng services ip6 daddr @cluster-ips iifname != "cbr0" jump mark-for-masquerade'],
      hasNot: [/saddr != /],
    },
    {
      name: "detectLocalMode InterfaceNamePrefix: a wildcard name match",
      config: { localDetect: { kind: "prefix", prefix: "veth" } },
      has: ['add rule ip kpng services ip daddr @cluster-ips iifname != "veth*" jump mark-for-masquerade'],
    },
    {
      name: "detectLocalMode NodeCIDR: the Node's pod CIDR of the family, not the cluster CIDR",
      config: { localDetect: { kind: "node-cidr", cidrs: ["198.19.0.0/24", "2001:db8:2::/64"] } },
      has: ["add rule ip kpng services ip daddr @cluster-ips ip saddr != 198.19.0.0/24 jump mark-for-masquerade"],
      hasNot: [/198\.19\.0\.0\/16/],
    },
    {
      name: "detectLocalMode NodeCIDR without a pod CIDR of the family: nothing is pod traffic, nothing masqueraded",
      config: { localDetect: { kind: "node-cidr", cidrs: ["2001:db8:2::/64"] } },
      has: [],
      hasNot: [/cluster-ips .*jump mark-for-masquerade/],
    },
    {
      name: "no pod CIDR, no masqueradeAll: no cluster-IP masquerade",
      config: { clusterCIDRs: [] },
      has: [],
      hasNot: [/cluster-ips .*jump mark-for-masquerade/],
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      const got = base(c.config, c.family);
      for (const h of c.has) expect(got.some((l) => l.includes(h))).toBe(true);
      for (const re of c.hasNot ?? []) expect(got.filter((l) => re.test(l))).toEqual([]);
    });
});

describe("nft shared dispatch chains", () => {
  const cases = [
    {
      name: "first port: indexes from 0, address from one map, target port from the other",
      spec: dispatchChainSpec("ip", "tcp", 0, 3),
      rule: "meta l4proto tcp dnat ip to ip daddr . numgen random mod 3 map @cluster-endpoints-tcp : ip daddr . tcp dport map @cluster-target-ports-tcp",
    },
    {
      name: "third port, IPv6, UDP: indexes from 2 * 16384",
      spec: dispatchChainSpec("ip6", "udp", 2, 5),
      rule: "meta l4proto udp dnat ip6 to ip6 daddr . numgen random mod 5 offset 32768 map @cluster-endpoints-udp : ip6 daddr . udp dport map @cluster-target-ports-udp",
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      expect(c.spec.rules.map((r) => r.rule)).toEqual([c.rule]);
    });
});

describe("nft names", () => {
  test("hash8: 8 base32 characters, stable", () => {
    expect(hash8("default/web/tcp/http")).toMatch(/^[A-Z2-7]{8}$/);
    expect(hash8("default/web/tcp/http")).toBe(hash8("default/web/tcp/http"));
    expect(hash8("default/web/tcp/http")).not.toBe(hash8("default/web/tcp/https"));
  });

  test("the longest names fit nft's 255 bytes", () => {
    const long = "n".repeat(63);
    const o = render(
      { namespace: long, name: long, clusterIPs: [cip, v6.clusterIP(1)], ports: [{ name: "p".repeat(15), port: 80 }], affinitySeconds: 5 },
      { a: ep({ ips: [v6.pod(0, 65535)], ports: { ["p".repeat(15)]: 8080 } }) },
      "ip6",
    );
    for (const n of [...o.chains.map((c) => c.name), ...o.sets.map((s) => s.name)]) expect(n.length).toBeLessThanOrEqual(255);
  });
});

describe("nft golden full sync", () => {
  test("dry-run output of a representative state", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const state = nodeState([
      entry(svc(web({ lbIPs: [lb, v6.external(1)], sourceRanges: ["198.18.128.0/24"] })), { a: pod(1), b: pod(2, { local: false }) }),
      entry(
        svc(
          web({ name: "sticky", clusterIPs: [v4.clusterIP(2)], affinitySeconds: 60, ports: [{ name: "dns", protocol: "UDP", port: 53 }] }),
        ),
        {
          a: pod(1, { ports: { dns: 5353 } }),
          b: pod(3, { ports: { dns: 5353 } }),
        },
      ),
      entry(
        svc(
          web({
            name: "local",
            clusterIPs: [v4.clusterIP(3)],
            eTPLocal: true,
            iTPLocal: true,
            externalIPs: [v4.external(3)],
            ports: [{ name: "http", port: 80, nodePort: 30081 }],
          }),
        ),
        {
          a: pod(4, { local: false, internal: false, external: false }),
        },
      ),
      entry(svc(web({ name: "empty", clusterIPs: [v4.clusterIP(4)], ports: [{ name: "s", protocol: "SCTP", port: 90 }] })), {}),
    ]);
    await backend.apply(state, null);
    const file = join(import.meta.dir, "golden", "full-sync.nft");
    if (process.env.UPDATE_GOLDEN) await Bun.write(file, ctx.printed.join(""));
    expect(ctx.printed.join("")).toBe(await Bun.file(file).text());
  });
});
