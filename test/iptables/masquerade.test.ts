// The balancing chain's masquerade rule (render-service.ts, enteredByDispatch):
// without upstream's destination match when only the cluster-IP dispatch (or
// already-marked traffic) enters the chain, with it when the EXT chain sends
// unmarked traffic there that must stay unmasqueraded. Packets through both
// forms: test/iptables/packets.test.ts and shapes-real.test.ts.

import { describe, expect, test } from "bun:test";
import type { Endpoint, Service } from "../../src/gen/localv1/services_pb.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import type { Config } from "../../src/core/config/config.ts";
import { ep, svc, testConfig, testContext, v4 } from "./fixtures.ts";

// Under eTP=Local the brain leaves remote endpoints out of the external scope.
const pod = (i: number, local: boolean, external = true) => ep({ ips: [v4.pod(0, i)], ports: { http: 8080 }, local, external });
const cip = v4.clusterIP(1);

/** The masquerade rules of the service's balancing chains, as printed for iptables-restore. */
async function masqueradeRules(service: Service, endpoints: Endpoint[], config: Partial<Config> = {}): Promise<string[]> {
  const ctx = testContext(testConfig({ dryRun: true, ...config }));
  const b = new IptablesBackend(ctx, { families: ["v4"] });
  b.setService(service);
  endpoints.forEach((e, i) => b.setEndpoint(service.Namespace, service.Name, `ep${i}`, e));
  await b.sync();
  return ctx.printed
    .join("")
    .split("\n")
    .filter((l) => /^-A KPNG-SV[CL]-\S+ .*-j KPNG-MARK-(MASQ|NONPOD)$/.test(l))
    .map((l) => l.replace(/^-A \S+ (-m comment --comment "[^"]*" )?/, ""));
}

const cases: { name: string; service: Service; endpoints: Endpoint[]; config?: Partial<Config>; want: string[] }[] = [
  {
    name: "ClusterIP: only the dispatch enters the chain, the rule does not match the cluster IP again",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80 }] }),
    endpoints: [pod(1, true), pod(2, false)],
    want: ["! -s 198.19.0.0/16 -j KPNG-MARK-MASQ"],
  },
  {
    name: "eTP=Cluster node port: EXT marks everything before it jumps to the chain",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
    endpoints: [pod(1, true), pod(2, false)],
    want: ["! -s 198.19.0.0/16 -j KPNG-MARK-MASQ"],
  },
  {
    name: "eTP=Local, a remote endpoint: EXT sends only pod and node traffic to SVC, outside clients to SVL",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80, nodePort: 30080 }], eTPLocal: true }),
    endpoints: [pod(1, true), pod(2, false, false)],
    want: ["! -s 198.19.0.0/16 -j KPNG-MARK-MASQ"],
  },
  {
    name: "eTP=Local, every endpoint local: outside clients reach the chain unmarked, the rule keeps the destination",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80, nodePort: 30080 }], eTPLocal: true }),
    endpoints: [pod(1, true), pod(2, true)],
    want: [`! -s 198.19.0.0/16 -d ${cip} -p tcp -m tcp --dport 80 -j KPNG-MARK-MASQ`],
  },
  {
    name: "masquerade-all, eTP=Local: pod clients reach the chain from EXT unmarked, the rule keeps the destination",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80, nodePort: 30080 }], eTPLocal: true }),
    endpoints: [pod(1, true), pod(2, false, false)],
    config: { masqueradeAll: true },
    want: [`-d ${cip} -p tcp -m tcp --dport 80 -j KPNG-MARK-MASQ`],
  },
  {
    name: "masquerade-all, ClusterIP: every source marked, no destination match",
    service: svc({ name: "web", clusterIPs: [cip], ports: [{ name: "http", port: 80 }] }),
    endpoints: [pod(1, true)],
    config: { masqueradeAll: true },
    want: ["-j KPNG-MARK-MASQ"],
  },
];

describe("iptables masquerade rule of a balancing chain", () => {
  for (const c of cases) test(c.name, async () => expect(await masqueradeRules(c.service, c.endpoints, c.config)).toEqual(c.want));
});
