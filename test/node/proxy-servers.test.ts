// The run command's servers: what a --dry-run opens, and kube-proxy's
// bindAddressHardFail when a port is taken.

import { afterEach, describe, expect, test } from "bun:test";
import { Brain } from "../../src/core/brain/brain.ts";
import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import { isUnavailable } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { startProxyServers, type ProxyServers } from "../../src/core/node/proxy-servers.ts";

let running: ProxyServers[] = [];
afterEach(() => {
  for (const s of running) s.close();
  running = [];
});

function start(cfg: Partial<Config>) {
  const log = memoryLogger();
  const s = startProxyServers({ cfg: defaultConfig({ nodeName: "node-1", ...cfg }), brain: new Brain(), log, backends: ["nft"] });
  running.push(s);
  return { s, log };
}

describe("servers beside the proxy", () => {
  test("a dry run leaves the default (all-interfaces) addresses alone", () => {
    const { s } = start({ dryRun: true });
    expect(s.urls).toEqual({});
  });

  test("a dry run opens addresses given explicitly", async () => {
    const { s } = start({ dryRun: true, healthzBindAddress: "127.0.0.1:0", metricsBindAddress: "127.0.0.1:0" });
    expect((await fetch(`${s.urls.healthz}/livez`)).status).toBe(200);
    expect(await (await fetch(`${s.urls.metrics}/proxyMode`)).text()).toBe("nftables");
  });

  test("a backend's rules lost: /healthz 503 and the counter, until its next sync", async () => {
    const { s } = start({ healthzBindAddress: "127.0.0.1:0", metricsBindAddress: "127.0.0.1:0" });
    const state = { nodeName: "node-1", rev: 1, services: new Map() };
    s.synced("nft", state, 0.01, null);
    s.rulesLost("nft", "delete table ip kpng");
    expect((await fetch(`${s.urls.healthz}/healthz`)).status).toBe(503);
    expect(await (await fetch(`${s.urls.metrics}/metrics`)).text()).toContain('kpng_backend_rules_lost_total{backend="nft"} 1');
    s.synced("nft", state, 0.01, null);
    expect((await fetch(`${s.urls.healthz}/healthz`)).status).toBe(200);
  });

  test('"" turns a server off', () => {
    const { s } = start({ healthzBindAddress: "", metricsBindAddress: "" });
    expect(s.urls).toEqual({});
  });

  test("port taken, bindAddressHardFail (v1alpha2 default): start-up fails", () => {
    const squatter = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    try {
      let err: unknown;
      try {
        start({ healthzBindAddress: `127.0.0.1:${squatter.port}`, metricsBindAddress: "" });
      } catch (e) {
        err = e;
      }
      expect(isUnavailable(err)).toBe(true);
      expect(String(err)).toContain(`healthz: cannot listen on 127.0.0.1:${squatter.port}`);
    } finally {
      squatter.stop(true);
    }
  });

  test("port taken in a dry run: logged, retried, not fatal", () => {
    const squatter = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    try {
      const { s, log } = start({ dryRun: true, healthzBindAddress: `127.0.0.1:${squatter.port}`, metricsBindAddress: "" });
      expect(s.urls.healthz).toBeUndefined();
      expect(log.lines.some((l) => l.includes("healthz server not started, retrying"))).toBe(true);
    } finally {
      squatter.stop(true);
    }
  });
});
