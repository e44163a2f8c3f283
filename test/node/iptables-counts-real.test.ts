// kube-proxy's iptables rule counts against the kernel: after full and
// partial restores into a real network namespace, kpng's
// kubeproxy_sync_proxy_rules_iptables_total{ip_family,table} is what
// iptables-save shows of kpng's (rules in its chains, and its jumps from the
// built-in chains).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { ProxyMetrics } from "../../src/core/node/metrics.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { ep, svc, testConfig, testContext, v4, v6 } from "../iptables/fixtures.ts";
import { value } from "./prom-text.ts";

let topo: Topology;
let b: IptablesBackend;
const metrics = new ProxyMetrics({ brain: new Brain(), backends: ["iptables"], defaultMetrics: false });

beforeAll(async () => {
  topo = await createTopology({ pods: 1, prefix: "kpmi" });
  const ctx = testContext(testConfig());
  ctx.metrics = metrics;
  b = new IptablesBackend(ctx, { executor: topo.executor(topo.node.ns), monitorPeriodMs: 0 });
  await b.setup();
}, 60_000);

afterAll(async () => {
  await b?.close();
  await topo?.destroy();
});

/** kpng's rules in one table as the kernel lists them */
async function kernelCount(family: "v4" | "v6", table: string): Promise<number> {
  const save = await topo.exec(topo.node.ns, [family === "v4" ? "iptables-save" : "ip6tables-save", "-t", table]);
  return save.split("\n").filter((l) => /^-A (KPNG-\S+ |.* -j KPNG-)/.test(l)).length;
}

async function reported(family: "IPv4" | "IPv6", table: string): Promise<number | undefined> {
  return value(await metrics.registry.metrics(), `kubeproxy_sync_proxy_rules_iptables_total{ip_family="${family}",table="${table}"}`);
}

describe("iptables rule counts, real kernel", () => {
  const pod = (i: number) => ep({ ips: [v4.pod(0, i), v6.pod(0, i)], ports: { http: 8080 } });
  const steps: Array<{ name: string; change: () => void }> = [
    {
      name: "first sync (full): two services, one endpoint each",
      change: () => {
        b.setService(svc({ name: "web", clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)], ports: [{ name: "http", port: 80 }] }));
        b.setEndpoint("default", "web", "a", pod(1));
        b.setService(
          svc({ name: "np", type: "NodePort", clusterIPs: [v4.clusterIP(2)], ports: [{ name: "http", port: 80, nodePort: 30080 }] }),
        );
        b.setEndpoint("default", "np", "a", pod(2));
      },
    },
    { name: "partial: an endpoint added", change: () => b.setEndpoint("default", "web", "b", pod(3)) },
    { name: "partial: a service deleted", change: () => b.deleteService("default", "np") },
  ];
  for (const step of steps)
    test(`${step.name}: the totals are what iptables-save shows`, async () => {
      step.change();
      await b.sync();
      for (const table of ["nat", "filter"]) {
        expect(await kernelCount("v4", table)).toBeGreaterThan(0);
        expect({ table, v4: await reported("IPv4", table) }).toEqual({ table, v4: await kernelCount("v4", table) });
        expect({ table, v6: await reported("IPv6", table) }).toEqual({ table, v6: await kernelCount("v6", table) });
      }
    }, 30_000);
});
