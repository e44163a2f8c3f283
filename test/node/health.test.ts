// kube-proxy's /healthz and /livez semantics with a fake clock, its exact
// bodies, and node eligibility; then the real server over HTTP on 127.0.0.1.

import { afterAll, describe, expect, test } from "bun:test";
import { goTime, healthAnswer, nodeIsEligible, ProxyHealth, startHealthServer, type Clock } from "../../src/core/node/health.ts";
import { memoryLogger } from "../../src/core/log.ts";

class FakeClock implements Clock {
  mono_ = 5000;
  wall_ = Date.UTC(2025, 0, 2, 3, 4, 5, 600);
  now() {
    return this.wall_;
  }
  mono() {
    return this.mono_;
  }
  advance(ms: number) {
    this.mono_ += ms;
    this.wall_ += ms;
  }
}

const TIMEOUT = 60_000; // 2 x a 30s syncPeriod

function setup(eligible = true) {
  const clock = new FakeClock();
  let nodeOK = eligible;
  const health = new ProxyHealth({ timeoutMs: TIMEOUT, clock, nodeEligible: () => nodeOK });
  const answer = (path: "healthz" | "livez") => healthAnswer(health, path, clock);
  return { clock, health, answer, setEligible: (b: boolean) => (nodeOK = b) };
}

describe("proxy health (kube-proxy's rules)", () => {
  const cases: Array<{ name: string; run: (s: ReturnType<typeof setup>) => void; healthz: number; livez: number }> = [
    { name: "starting up, nothing synced yet: healthy", run: () => {}, healthz: 200, livez: 200 },
    {
      name: "a change queued before any sync: still healthy (no backend has synced)",
      run: ({ health, clock }) => (health.queued("nft", 1), clock.advance(TIMEOUT * 2)),
      healthz: 200,
      livez: 200,
    },
    {
      name: "synced, then a change waiting less than the timeout: healthy",
      run: ({ health, clock }) => (health.updated("nft", 1), health.queued("nft", 2), clock.advance(TIMEOUT - 1)),
      healthz: 200,
      livez: 200,
    },
    {
      name: "synced, then a change waiting the timeout: unhealthy",
      run: ({ health, clock }) => (health.updated("nft", 1), health.queued("nft", 2), clock.advance(TIMEOUT)),
      healthz: 503,
      livez: 503,
    },
    {
      name: "the waiting change applied: healthy again",
      run: ({ health, clock }) => (health.updated("nft", 1), health.queued("nft", 2), clock.advance(TIMEOUT), health.updated("nft", 2)),
      healthz: 200,
      livez: 200,
    },
    {
      name: "a newer revision queued while one applied keeps waiting",
      run: ({ health, clock }) => (
        health.updated("nft", 1), health.queued("nft", 2), health.queued("nft", 3), health.updated("nft", 2), clock.advance(TIMEOUT)
      ),
      healthz: 503,
      livez: 503,
    },
    {
      name: "one stuck backend of two makes the proxy unhealthy",
      run: ({ health, clock }) => (
        health.updated("nft", 1),
        health.updated("iptables", 1),
        health.queued("nft", 2),
        health.queued("iptables", 2),
        health.updated("nft", 2),
        clock.advance(TIMEOUT)
      ),
      healthz: 503,
      livez: 503,
    },
    { name: "node being deleted: /healthz 503, /livez still 200", run: ({ setEligible }) => setEligible(false), healthz: 503, livez: 200 },
    // kpng's addition: what it knows to be broken is unhealthy at once, not after the timeout
    {
      name: "rules known to be gone (someone flushed them): unhealthy at once",
      run: ({ health }) => (health.updated("nft", 1), health.rulesLost("nft")),
      healthz: 503,
      livez: 503,
    },
    {
      name: "rules gone, then the repairing full sync applied: healthy again",
      run: ({ health }) => (health.updated("nft", 1), health.rulesLost("nft"), health.updated("nft", 1)),
      healthz: 200,
      livez: 200,
    },
    {
      name: "one failed sync (retried at once): still healthy",
      run: ({ health }) => (health.updated("nft", 1), health.failed("nft")),
      healthz: 200,
      livez: 200,
    },
    {
      name: "syncs keep failing (FAILURES_UNHEALTHY in a row): unhealthy at once",
      run: ({ health }) => (health.updated("nft", 1), health.failed("nft"), health.failed("nft")),
      healthz: 503,
      livez: 503,
    },
    {
      name: "failing syncs, then one succeeds: healthy again",
      run: ({ health }) => (health.failed("nft"), health.failed("nft"), health.updated("nft", 2)),
      healthz: 200,
      livez: 200,
    },
    {
      name: "one backend's rules gone, the other's fine: unhealthy",
      run: ({ health }) => (health.updated("nft", 1), health.updated("iptables", 1), health.rulesLost("iptables")),
      healthz: 503,
      livez: 503,
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const s = setup();
      c.run(s);
      expect([s.answer("healthz").status, s.answer("livez").status]).toEqual([c.healthz, c.livez]);
    });
  }

  test("bodies are kube-proxy's, byte for byte (healthy: lastUpdated is now)", () => {
    const s = setup();
    s.health.updated("nft", 1);
    const now = "2025-01-02 03:04:05.6 +0000 UTC m=+5.000000000";
    expect(s.answer("healthz").body).toBe(`{"lastUpdated": "${now}","currentTime": "${now}", "nodeEligible": true}`);
    expect(s.answer("livez").body).toBe(`{"lastUpdated": "${now}","currentTime": "${now}"}`);
  });

  test("unhealthy: lastUpdated is the last successful sync", () => {
    const s = setup();
    s.health.updated("nft", 1);
    s.health.queued("nft", 2);
    s.clock.advance(TIMEOUT + 400);
    const body = JSON.parse(s.answer("healthz").body);
    expect(body).toEqual({
      lastUpdated: "2025-01-02 03:04:05.6 +0000 UTC m=+5.000000000",
      currentTime: "2025-01-02 03:05:06 +0000 UTC m=+65.400000000",
      nodeEligible: true,
    });
  });

  test("Go's time format: zero time, trimmed fractions", () => {
    expect(goTime(null)).toBe("0001-01-01 00:00:00 +0000 UTC");
    expect(goTime({ wall: Date.UTC(2024, 11, 31, 23, 59, 59, 120), mono: 1.5 })).toBe("2024-12-31 23:59:59.12 +0000 UTC m=+0.001500000");
  });

  const nodes: Array<{ name: string; node: Parameters<typeof nodeIsEligible>[0]; eligible: boolean }> = [
    { name: "no Node object yet: eligible", node: undefined, eligible: true },
    { name: "plain node: eligible", node: { metadata: {}, spec: {} }, eligible: true },
    { name: "deletionTimestamp set: not eligible", node: { metadata: { deletionTimestamp: "2025-01-01T00:00:00Z" } }, eligible: false },
    {
      name: "ToBeDeletedByClusterAutoscaler taint: not eligible",
      node: { spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler", effect: "NoSchedule" }] } },
      eligible: false,
    },
    {
      name: "another taint: eligible",
      node: { spec: { taints: [{ key: "node.kubernetes.io/unschedulable", effect: "NoSchedule" }] } },
      eligible: true,
    },
  ];
  for (const c of nodes) test(`node eligibility: ${c.name}`, () => expect(nodeIsEligible(c.node)).toBe(c.eligible));
});

describe("health server over HTTP", () => {
  const health = new ProxyHealth({ timeoutMs: TIMEOUT });
  const answers: string[] = [];
  const server = startHealthServer({ address: "127.0.0.1:0", health, log: memoryLogger(), onAnswer: (p, c) => answers.push(`${p}:${c}`) });
  afterAll(() => server.close());

  test("/healthz and /livez: 200, JSON, nosniff", async () => {
    for (const path of ["healthz", "livez"]) {
      const r = await fetch(`${server.url}/${path}`);
      expect(r.status).toBe(200);
      expect(r.headers.get("content-type")).toBe("application/json");
      expect(r.headers.get("x-content-type-options")).toBe("nosniff");
      const body = (await r.json()) as object;
      expect(Object.keys(body)).toEqual(
        path === "healthz" ? ["lastUpdated", "currentTime", "nodeEligible"] : ["lastUpdated", "currentTime"],
      );
    }
    expect(answers).toEqual(["healthz:200", "livez:200"]);
  });

  test("other paths: 404", async () => {
    expect((await fetch(`${server.url}/metrics`)).status).toBe(404);
  });
});
