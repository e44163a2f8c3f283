// The run command's health and metrics servers start after the first sync
// (late-servers.ts): what is reported before they run is handed to them with
// the time it happened, so they answer as servers that ran from the start
// would; and they start by their deadline when no first sync comes.

import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import { Brain, type Revision } from "../../src/core/brain/brain.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import { isUnavailable } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { LateServers } from "../../src/core/node/late-servers.ts";
import { startProxyServers, type ProxyServers } from "../../src/core/node/proxy-servers.ts";
import { waitFor } from "../sources/kube/helpers.ts";
import { LOADED_WAIT_MS } from "../harness/kpng-process.ts";
import { value } from "./prom-text.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);

let closing: Array<{ close(): void }> = [];
afterEach(() => {
  for (const c of closing) c.close();
  closing = [];
});

const LOCAL = { healthzBindAddress: "127.0.0.1:0", metricsBindAddress: "127.0.0.1:0" };

/** LateServers over real servers on 127.0.0.1, and the servers once started. */
function late(opts: { latestMs?: number; holdRevisionsMs?: number; cfg?: Partial<Config> } = {}) {
  const started: { servers?: ProxyServers } = {};
  const log = memoryLogger();
  const l = new LateServers({
    latestMs: opts.latestMs ?? 600_000,
    holdRevisionsMs: opts.holdRevisionsMs,
    start: async () =>
      (started.servers = startProxyServers({
        cfg: defaultConfig({ nodeName: "node-1", ...LOCAL, ...opts.cfg }),
        brain: new Brain(),
        log,
        backends: ["nft"],
      })),
  });
  closing.push(l);
  return { late: l, started, log };
}

const state: NodeState = { nodeName: "node-1", rev: 1, services: new Map() };
const rev1: Revision = { state, change: null };

const healthz = async (s: ProxyServers) => {
  const r = await fetch(`${s.urls.healthz}/healthz`);
  return { status: r.status, body: JSON.parse(await r.text()) as { lastUpdated: string } };
};
const metricsText = async (s: ProxyServers) => (await fetch(`${s.urls.metrics}/metrics`)).text();

describe("health and metrics servers that start late", () => {
  test("nothing listens before they start", () => {
    const { started } = late();
    expect(started.servers).toBeUndefined();
  });

  test("a first sync reported before they start: its time and figures are the servers', not the moment they started", async () => {
    const { late: l, started } = late();
    const queuedAt = Date.now();
    l.queued(rev1);
    l.synced("nft", state, 0.25, null);
    const syncedAt = Date.now();
    await Bun.sleep(1100); // the servers start more than a second after the sync
    await l.start();
    const s = started.servers!;
    const t = await metricsText(s);
    expect(value(t, 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_full_proxy_rules_duration_seconds_sum{ip_family="IPv6"}')).toBe(0.25);
    const last = value(t, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}')!;
    expect(last * 1000).toBeGreaterThanOrEqual(queuedAt);
    expect(last * 1000).toBeLessThanOrEqual(syncedAt);
    const queued = value(t, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')!;
    expect(queued * 1000).toBeLessThanOrEqual(syncedAt);
    expect(value(t, "kubeproxy_sync_proxy_rules_service_changes_pending")).toBe(0);
    // healthy, with the sync done: lastUpdated is "now" while healthy (kube-proxy's rule), so check the health itself
    expect((await healthz(s)).status).toBe(200);
    expect(s.health.check().lastUpdated!.wall).toBeLessThanOrEqual(syncedAt);
  });

  test("a revision queued before they start is late from when it was queued, not from when they started", async () => {
    // health timeout = 2 x syncPeriod = 500 ms
    const { late: l, started } = late({ cfg: { syncPeriodSeconds: 0.25 } });
    l.queued(rev1);
    l.synced("nft", state, 0.01, null);
    l.queued({ state: { ...state, rev: 2 }, change: new Set(["default/web"]) });
    await Bun.sleep(700);
    await l.start();
    expect((await healthz(started.servers!)).status).toBe(503);
    l.synced("nft", { ...state, rev: 2 }, 0.01, new Set(["default/web"]));
    expect((await healthz(started.servers!)).status).toBe(200);
  });

  test("failures, lost rules and backend reports before they start are counted; /healthz says 503 for lost rules", async () => {
    const { late: l, started } = late();
    l.synced("nft", state, 0.01, null);
    l.rulesLost("nft", "delete table ip kpng");
    l.failed("nft", new Error("boom"));
    l.backendMetrics.transactionFailed("nft", 4, false);
    l.backendMetrics.conntrackReconciled(6, 0.002, 3);
    l.backendMetrics.rulesDrift("nft", 4);
    await l.start();
    const s = started.servers!;
    const t = await metricsText(s);
    expect(value(t, 'kpng_backend_rules_lost_total{backend="nft"}')).toBe(1);
    expect(value(t, 'kpng_backend_sync_failures_total{backend="nft"}')).toBe(1);
    expect(value(t, 'kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"}')).toBe(1);
    expect(value(t, 'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv6"}')).toBe(3);
    expect(value(t, 'kpng_backend_rules_drift{backend="nft"}')).toBe(4);
    expect((await healthz(s)).status).toBe(503);
  });

  test("no first sync: they start by their deadline, healthy while starting up", async () => {
    const { started, log } = late({ latestMs: performance.now() + 100 });
    const s = await waitFor("the servers", () => started.servers, LOADED_WAIT_MS);
    expect((await healthz(s)).status).toBe(200);
    expect(await (await fetch(`${s.urls.metrics}/proxyMode`)).text()).toBe("nftables");
    expect(log.lines.some((l) => l.includes("serving healthz"))).toBe(true);
  });

  test("a first sync under way at the deadline gets one more period; then they start, and count its revision once it is reported", async () => {
    const { late: l, started } = late({ latestMs: performance.now() + 100 });
    l.queued(rev1);
    await Bun.sleep(150);
    expect(started.servers).toBeUndefined(); // the sync may go on undisturbed
    const s = await waitFor("the servers", () => started.servers, LOADED_WAIT_MS); // never synced: started at the second deadline
    expect((await healthz(s)).status).toBe(200); // healthy while starting up
    // the whole first revision waits for its sync (counting it would only slow that sync)
    expect(value(await metricsText(s), 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')).toBeUndefined();
    const before = Date.now();
    l.synced("nft", state, 0.5, null);
    const t = await metricsText(s);
    expect(value(t, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')! * 1000).toBeLessThan(before);
    expect(value(t, 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"}')).toBe(1);
  });

  test("a revision queued after they started at their deadline, before any sync: counted once a sync is reported, even a failed one", async () => {
    const { late: l, started } = late({ latestMs: performance.now() + 50 });
    const s = await waitFor("the servers", () => started.servers, LOADED_WAIT_MS);
    l.queued(rev1);
    expect(value(await metricsText(s), 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')).toBeUndefined();
    l.failed("nft", new Error("boom"));
    const t = await metricsText(s);
    expect(value(t, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')).toBeGreaterThan(0);
    expect(value(t, 'kpng_backend_sync_failures_total{backend="nft"}')).toBe(1);
    await Bun.sleep(20);
    l.queued({ state: { ...state, rev: 2 }, change: new Set() }); // told at once now
    const later = value(await metricsText(s), 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')!;
    expect(later).toBeGreaterThan(value(t, 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')!);
  });

  test("a first sync that never reports: its revisions are counted after holdRevisionsMs all the same (each held one keeps its state)", async () => {
    const { late: l, started } = late({ latestMs: performance.now() + 20, holdRevisionsMs: 200 });
    const s = await waitFor("the servers", () => started.servers, LOADED_WAIT_MS);
    l.queued(rev1);
    expect(value(await metricsText(s), 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}')).toBeUndefined();
    await waitFor("the revision counted", async () =>
      value(await metricsText(s), 'kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"}'),
    );
  });

  test("started once, whoever asks first", async () => {
    let starts = 0;
    const l = new LateServers({
      latestMs: performance.now() + 50,
      start: async () => {
        starts++;
        return startProxyServers({
          cfg: defaultConfig({ nodeName: "node-1", healthzBindAddress: "", metricsBindAddress: "" }),
          brain: new Brain(),
          log: memoryLogger(),
          backends: [],
        });
      },
    });
    closing.push(l);
    await Promise.all([l.start(), l.start()]);
    await Bun.sleep(150);
    expect(starts).toBe(1);
  });

  test("closed before they start: they never do", async () => {
    const { late: l, started } = late({ latestMs: performance.now() + 50 });
    l.close();
    await Bun.sleep(150);
    await l.start();
    expect(started.servers).toBeUndefined();
  });

  test("a port taken with bindAddressHardFail: cannotStart rejects with the reason", async () => {
    const squatter = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    try {
      const { late: l } = late({ cfg: { healthzBindAddress: `127.0.0.1:${squatter.port}`, metricsBindAddress: "" } });
      await l.start();
      const err = await l.cannotStart.catch((e: unknown) => e);
      expect(isUnavailable(err)).toBe(true);
      expect(String(err)).toContain(`healthz: cannot listen on 127.0.0.1:${squatter.port}`);
    } finally {
      squatter.stop(true);
    }
  });
});
