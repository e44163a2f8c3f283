// What backends report from inside their syncs (BackendContext.metrics),
// counted under kube-proxy's names: refused transactions per family and
// kind of sync, and the conntrack cleanup after every sync.

import { describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { ProxyMetrics } from "../../src/core/node/metrics.ts";
import { recordingExecutor } from "../../plugins/iptables/executor.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { ep as iptEp, svc as iptSvc, testConfig, testContext, v4, v6 } from "../iptables/fixtures.ts";
import { context, entry, ep, isTransaction, nextState, nodeConfig, nodeState, recorder, svc } from "../nft/fixtures.ts";
import { value } from "./prom-text.ts";

const metricsFor = (backend: string) => new ProxyMetrics({ brain: new Brain(), backends: [backend], defaultMetrics: false });
const both = async (m: ProxyMetrics, name: string) => {
  const t = await m.registry.metrics();
  return [value(t, `${name}{ip_family="IPv4"}`), value(t, `${name}{ip_family="IPv6"}`)];
};

describe("nft reports", () => {
  const service = (i: number, eps: number[]) =>
    entry(
      svc({ namespace: "default", name: `svc${i}`, clusterIPs: [`10.0.0.${i + 1}`], ports: [{ name: "dns", protocol: "UDP", port: 53 }] }),
      Object.fromEntries(eps.map((x) => [`p${x}`, ep({ ips: [`11.0.0.${x}`], local: false, ports: { dns: 5353 } })])),
    );

  test("a refused partial transaction (redone in full within the sync): one nftables sync failure per family; each sync's conntrack cleanup, per family", async () => {
    let n = 0;
    const { exec } = recorder((argv) => (isTransaction({ argv }) && ++n === 2 ? "nft: Error: No such file or directory" : undefined));
    const ctx = context(nodeConfig());
    const metrics = metricsFor("nft");
    ctx.metrics = metrics;
    const backend = createNftBackend(ctx, { exec });
    const before = nodeState([service(0, [1, 2]), service(1, [3])]);
    await backend.apply(before, null);
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_nftables_sync_failures_total")).toEqual([0, 0]);
    // an endpoint of a UDP service gone: its flows are stale
    const { state, change } = nextState(before, [service(0, [1])]);
    await backend.apply(state, change);
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_nftables_sync_failures_total")).toEqual([1, 1]);
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total")).toEqual([0, 0]);
    expect(await both(metrics, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count")).toEqual([2, 2]);
    // one filtered `conntrack -D` for the gone endpoint (the recorder answers it: a success)
    expect(await both(metrics, "kubeproxy_conntrack_reconciler_deleted_entries_total")).toEqual([1, 0]);
  });
});

describe("iptables reports", () => {
  const web = iptSvc({ name: "web", clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)], ports: [{ name: "http", port: 80 }] });
  const pod = (i: number) => iptEp({ ips: [v4.pod(0, i), v6.pod(0, i)], ports: { http: 8080 } });

  test("ip6tables-restore refused in a partial sync: restore and partial restore failures in IPv6 only; then a full one refused: restore failures only", async () => {
    let fail = false;
    const rec = recordingExecutor(({ argv }) => {
      if (fail && argv[0] === "ip6tables-restore") throw new Error("ip6tables-restore: line 3 failed");
      return "";
    });
    const ctx = testContext(testConfig());
    const metrics = metricsFor("iptables");
    ctx.metrics = metrics;
    const b = new IptablesBackend(ctx, { executor: rec, monitorPeriodMs: 0 });
    b.setService(web);
    b.setEndpoint("default", "web", "a", pod(1));
    await b.sync();
    fail = true;
    b.setEndpoint("default", "web", "b", pod(2));
    await expect(b.sync()).rejects.toThrow("line 3 failed");
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total")).toEqual([0, 1]);
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total")).toEqual([0, 1]);
    await expect(b.sync()).rejects.toThrow("line 3 failed"); // now a full one
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total")).toEqual([0, 2]);
    expect(await both(metrics, "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total")).toEqual([0, 1]);
    // the one sync that completed reconciled conntrack for both families
    expect(await both(metrics, "kubeproxy_conntrack_reconciler_sync_duration_seconds_count")).toEqual([1, 1]);
  });

  test("rule counts per family and table: what each sync wrote, and what kpng owns (a partial sync's running total equals a full restore's count)", async () => {
    let clock = 0;
    const rec = recordingExecutor(() => "");
    const ctx = testContext(testConfig());
    const metrics = metricsFor("iptables");
    ctx.metrics = metrics;
    const b = new IptablesBackend(ctx, { executor: rec, monitorPeriodMs: 0, now: () => clock, fullSyncPeriodMs: 1000 });
    const counts = async (table: string) => {
      const t = await metrics.registry.metrics();
      const at = (name: string, f: string) => value(t, `${name}{ip_family="${f}",table="${table}"}`);
      return {
        total: [at("kubeproxy_sync_proxy_rules_iptables_total", "IPv4"), at("kubeproxy_sync_proxy_rules_iptables_total", "IPv6")],
        last: [at("kubeproxy_sync_proxy_rules_iptables_last", "IPv4"), at("kubeproxy_sync_proxy_rules_iptables_last", "IPv6")],
      };
    };
    b.setService(web);
    b.setEndpoint("default", "web", "a", pod(1));
    await b.sync(); // full
    const first = await counts("nat");
    expect(first.total[0]).toBeGreaterThan(0);
    expect(first.last).toEqual(first.total);
    b.setEndpoint("default", "web", "b", pod(2));
    await b.sync(); // partial: the service's chains again, and the new endpoint's
    const partial = await counts("nat");
    expect(partial.last[0]).toBeLessThan(partial.total[0]!);
    expect(partial.total[0]).toBeGreaterThan(first.total[0]!);
    clock = 5000;
    await b.sync(); // full again (the period is over): a recount from scratch
    const full = await counts("nat");
    expect(full.total).toEqual(partial.total);
    expect(full.last).toEqual(full.total);
    expect((await counts("filter")).total[0]).toBeGreaterThan(0);
  });
});
