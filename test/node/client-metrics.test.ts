// client-go's rest_client_* metrics for kpng's API client, and
// kubernetes_build_info: names, labels, buckets, and what one request counts.

import { afterAll, describe, expect, test } from "bun:test";
import { Registry } from "prom-client";
import { buildInfoLabels, registerBuildInfo, REST_CLIENT_BUCKETS, RestClientMetrics } from "../../src/core/node/client-metrics.ts";
import { Brain } from "../../src/core/brain/brain.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { LateServers } from "../../src/core/node/late-servers.ts";
import { startProxyServers, type ProxyServers } from "../../src/core/node/proxy-servers.ts";
import { kubeRequest, readBody, serverHost } from "../../src/core/kube-http/request.ts";
import type { KubeAccess } from "../../src/core/kube-http/access.ts";
import pkg from "../../package.json" with { type: "json" };
import { bucketsOf, typeOf, value } from "./prom-text.ts";

// A server answering 200 to /ok, 404 to anything else, and holding /watch open.
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    const path = new URL(req.url).pathname;
    if (path === "/ok") return new Response("{}");
    if (path === "/watch") return new Response(new ReadableStream({ start: (c) => c.enqueue(new TextEncoder().encode("{}\n")) }));
    return new Response("{}", { status: 404 });
  },
});
afterAll(() => server.stop(true));

function rig(url = `http://127.0.0.1:${server.port}`) {
  const registry = new Registry();
  const restClient = new RestClientMetrics([registry]);
  const access: KubeAccess = { server: url, tls: { insecure: false }, credentials: async () => ({ refused() {} }), observe: restClient };
  return { request: kubeRequest(access), text: () => registry.metrics(), host: new URL(url).host };
}

describe("rest_client_* (client-go's restclient metrics)", () => {
  test("families, labels and client-go's latency buckets", async () => {
    const { request, text, host } = rig();
    await readBody(await request({ path: "/ok" }));
    const t = await text();
    expect(typeOf(t, "rest_client_requests_total")).toBe("counter");
    expect(typeOf(t, "rest_client_request_duration_seconds")).toBe("histogram");
    expect(value(t, `rest_client_requests_total{code="200",method="GET",host="${host}"}`)).toBe(1);
    expect(value(t, `rest_client_request_duration_seconds_count{verb="GET",host="${host}"}`)).toBe(1);
    expect(bucketsOf(t, "rest_client_request_duration_seconds")).toEqual(REST_CLIENT_BUCKETS);
    expect(REST_CLIENT_BUCKETS).toEqual([0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60]);
  });

  test("each answer counted by its code and method; a POST is a POST", async () => {
    const { request, text, host } = rig();
    await readBody(await request({ path: "/ok" }));
    await readBody(await request({ path: "/nope" }));
    await readBody(await request({ path: "/nope" }));
    await readBody(await request({ method: "POST", path: "/ok", body: { a: 1 } }));
    const t = await text();
    expect(value(t, `rest_client_requests_total{code="404",method="GET",host="${host}"}`)).toBe(2);
    expect(value(t, `rest_client_requests_total{code="200",method="POST",host="${host}"}`)).toBe(1);
    expect(value(t, `rest_client_request_duration_seconds_count{verb="GET",host="${host}"}`)).toBe(3);
    expect(value(t, `rest_client_request_duration_seconds_count{verb="POST",host="${host}"}`)).toBe(1);
  });

  test('no answer (connection refused): code "<error>", as client-go counts it', async () => {
    const closed = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("") });
    const url = `http://127.0.0.1:${closed.port}`;
    closed.stop(true);
    const { request, text, host } = rig(url);
    await expect(request({ path: "/ok" })).rejects.toThrow();
    expect(value(await text(), `rest_client_requests_total{code="<error>",method="GET",host="${host}"}`)).toBe(1);
  });

  test("a watch is counted when its headers arrive, not timed (client-go's Request.Watch)", async () => {
    const { request, text, host } = rig();
    const ctl = new AbortController();
    const res = await request({ path: "/watch", query: { watch: "true" }, signal: ctl.signal });
    const t = await text();
    expect(value(t, `rest_client_requests_total{code="200",method="GET",host="${host}"}`)).toBe(1);
    expect(value(t, `rest_client_request_duration_seconds_count{verb="GET",host="${host}"}`)).toBeUndefined();
    res.destroy();
    ctl.abort();
  });

  test("requests answered before the metrics exist (they start after the first sync) are counted once they do, then each as it comes", async () => {
    let servers: ProxyServers | undefined;
    const late = new LateServers({
      latestMs: 600_000,
      start: async () =>
        (servers = startProxyServers({
          cfg: defaultConfig({ nodeName: "node-1", healthzBindAddress: "", metricsBindAddress: "" }),
          brain: new Brain(),
          log: memoryLogger(),
          backends: [],
        })),
    });
    try {
      const url = `http://127.0.0.1:${server.port}`;
      const access: KubeAccess = {
        server: url,
        tls: { insecure: false },
        credentials: async () => ({ refused() {} }),
        observe: late.restClient,
      };
      const request = kubeRequest(access);
      await readBody(await request({ path: "/ok" }));
      await readBody(await request({ path: "/missing" }));
      await late.start();
      const registry = servers!.metrics.registry;
      const host = new URL(url).host;
      expect(value(await registry.metrics(), `rest_client_requests_total{code="200",method="GET",host="${host}"}`)).toBe(1);
      expect(value(await registry.metrics(), `rest_client_requests_total{code="404",method="GET",host="${host}"}`)).toBe(1);
      await readBody(await request({ path: "/ok" }));
      const t = await registry.metrics();
      expect(value(t, `rest_client_requests_total{code="200",method="GET",host="${host}"}`)).toBe(2);
      expect(value(t, `rest_client_request_duration_seconds_count{verb="GET",host="${host}"}`)).toBe(3);
    } finally {
      late.close();
    }
  });
});

test.each([
  ["https://10.96.0.1:443", "10.96.0.1:443"],
  ["https://[fd00::1]:6443/", "[fd00::1]:6443"],
  ["http://api.example:8080/prefix", "api.example:8080"],
  ["https://api.example", "api.example"],
])("host label of %s: %s (as written, a default port kept)", (server, host) => {
  expect(serverHost(server)).toBe(host);
});

describe("kubernetes_build_info", () => {
  test("a constant 1 with kube-proxy's labels, carrying kpng's version", async () => {
    const registry = new Registry();
    registerBuildInfo([registry]);
    const t = await registry.metrics();
    expect(typeOf(t, "kubernetes_build_info")).toBe("gauge");
    const labels = buildInfoLabels();
    expect(Object.keys(labels).sort()).toEqual([
      "build_date",
      "compiler",
      "git_commit",
      "git_tree_state",
      "git_version",
      "go_version",
      "major",
      "minor",
      "platform",
    ]);
    expect(labels.git_version).toBe(`v${pkg.version}`);
    expect([labels.major, labels.minor]).toEqual(pkg.version.split(".").slice(0, 2));
    expect(labels.platform).toMatch(/^linux\/(amd64|arm64)$/);
    const line = t.split("\n").find((l) => l.startsWith("kubernetes_build_info{"))!;
    expect(line).toContain(`git_version="v${pkg.version}"`);
    expect(line.endsWith(" 1")).toBe(true);
  });
});
