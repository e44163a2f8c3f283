// Golden output of the renderer: the full restore input for small, named
// scenarios, compared byte for byte with test/iptables/golden/*.restore
// (rendered by a dry-run backend, so nothing runs). After an intended change,
// regenerate with UPDATE_GOLDEN=1 and review the diff.

import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Endpoint, Service } from "../../src/gen/localv1/services_pb.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import type { Family } from "../../src/host/toolkit/index.ts";
import { plan } from "../fixtures/addresses.ts";
import { ep, svc, testConfig, testContext, v4, v6 } from "./fixtures.ts";
import type { Config } from "../../src/core/config/config.ts";

interface Scenario {
  name: string;
  family?: Family;
  config?: Partial<Config>;
  hairpinSet?: boolean;
  services: { service: Service; endpoints: Endpoint[] }[];
}

const pod = (i: number, opts: Parameters<typeof ep>[0] extends infer T ? Omit<T & object, "ips"> : never = {}) =>
  ep({ ips: [v4.pod(0, i), v6.pod(0, i)], ports: { http: 8080, dns: 5353 }, ...opts });

/** an eTP=Local LoadBalancer with a local endpoint: its EXT chain short-circuits pod traffic */
const etpLocalLB = () => [
  {
    service: svc({
      name: "lb",
      clusterIPs: [v4.clusterIP(4)],
      lbIPs: [v4.external(1)],
      ports: [{ name: "http", port: 80, nodePort: 30080 }],
      eTPLocal: true,
      healthCheckNodePort: 32000,
    }),
    endpoints: [pod(1, { local: true })],
  },
];

const scenarios: Scenario[] = [
  {
    name: "clusterip-two-endpoints",
    services: [
      {
        service: svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80 }] }),
        endpoints: [pod(1, { local: true }), pod(2)],
      },
    ],
  },
  {
    name: "clusterip-two-endpoints-without-ipset",
    // upstream's layout: a SEP chain per endpoint does hairpin and DNAT
    hairpinSet: false,
    services: [
      {
        service: svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80 }] }),
        endpoints: [pod(1, { local: true }), pod(2)],
      },
    ],
  },
  {
    name: "clusterip-ipv6",
    family: "v6",
    services: [
      {
        service: svc({ name: "web", clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
        endpoints: [pod(1)],
      },
    ],
  },
  {
    name: "nodeport-etp-local-with-remote-endpoint",
    services: [
      {
        service: svc({
          name: "np",
          clusterIPs: [v4.clusterIP(2)],
          ports: [{ name: "http", port: 80, nodePort: 30080 }],
          eTPLocal: true,
          healthCheckNodePort: 32000,
        }),
        endpoints: [pod(1, { local: true }), pod(2, { local: false, external: false })],
      },
    ],
  },
  {
    name: "loadbalancer-source-ranges-affinity",
    services: [
      {
        service: svc({
          name: "lb",
          clusterIPs: [v4.clusterIP(3)],
          lbIPs: [v4.external(1)],
          externalIPs: [v4.external(2)],
          ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 30053 }],
          sourceRanges: [plan.v4.clientCIDR, plan.v4.nodeCIDR],
          affinitySeconds: 300,
        }),
        endpoints: [pod(1), pod(2)],
      },
    ],
  },
  {
    name: "no-endpoints-and-itp-local-without-local",
    services: [
      {
        service: svc({
          name: "none",
          clusterIPs: [v4.clusterIP(4)],
          externalIPs: [v4.external(3)],
          ports: [{ name: "http", port: 80, nodePort: 30081 }],
        }),
        endpoints: [],
      },
      {
        service: svc({ name: "itp", clusterIPs: [v4.clusterIP(5)], ports: [{ name: "http", port: 80 }], iTPLocal: true }),
        endpoints: [pod(3, { internal: false })],
      },
    ],
  },
  {
    name: "masquerade-all-bit-5-node-port-cidr",
    config: { masqueradeAll: true, masqueradeBit: 5, nodePortAddresses: [plan.v4.nodeCIDR] },
    services: [
      {
        service: svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
        endpoints: [pod(1)],
      },
    ],
  },
  {
    name: "two-cluster-cidrs",
    config: { clusterCIDRs: [plan.v4.clusterCIDR, "198.18.144.0/20"] },
    services: [{ service: svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80 }] }), endpoints: [pod(1)] }],
  },
  // detectLocalMode (kube-proxy's LocalTrafficDetector): `! -i cbr0` masquerades, `-i cbr0` short-circuits eTP=Local
  {
    name: "detect-local-bridge-interface",
    config: { localDetect: { kind: "bridge", iface: "cbr0" } },
    services: etpLocalLB(),
  },
  {
    name: "detect-local-interface-name-prefix",
    config: { localDetect: { kind: "prefix", prefix: "veth" } },
    services: etpLocalLB(),
  },
  {
    name: "detect-local-node-cidr",
    // the Node's spec.podCIDRs, not the cluster CIDR
    config: { localDetect: { kind: "node-cidr", cidrs: ["198.19.0.0/24", "2001:db8:2::/64"] } },
    services: [{ service: svc({ name: "web", clusterIPs: [v4.clusterIP(1)], ports: [{ name: "http", port: 80 }] }), endpoints: [pod(1)] }],
  },
];

async function render(s: Scenario): Promise<string> {
  const ctx = testContext(testConfig({ dryRun: true, ...s.config }));
  const b = new IptablesBackend(ctx, { families: [s.family ?? "v4"], hairpinSet: s.hairpinSet });
  for (const { service, endpoints } of s.services) {
    b.setService(service);
    endpoints.forEach((e, i) => b.setEndpoint(service.Namespace, service.Name, `ep${i}`, e));
  }
  await b.sync();
  return ctx.printed.join("");
}

const dir = join(import.meta.dir, "golden");

describe("iptables renderer golden output", () => {
  for (const s of scenarios) {
    test(s.name, async () => {
      const got = await render(s);
      const file = join(dir, `${s.name}.restore`);
      if (process.env.UPDATE_GOLDEN === "1" || !existsSync(file)) {
        mkdirSync(dir, { recursive: true });
        writeFileSync(file, got);
        if (process.env.UPDATE_GOLDEN !== "1") throw new Error(`golden file ${file} was missing: written, review it`);
      }
      expect(got).toBe(readFileSync(file, "utf8"));
    });
  }
});
