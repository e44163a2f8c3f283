// The whole thing, as an operator runs it: `kpng --kubeconfig K --backend nft
// --dry-run` against the real kube-apiserver 1.36.2 + etcd
// (test/harness/kube-apiserver.ts, a control plane of this file's own: the
// outages stop it), objects written with kubectl: printing rules, following
// changes, riding out an API server outage without touching the rules, and
// answering /healthz, /livez, /metrics and health-check node ports to a real
// curl. kpng listens on 127.0.0.1 only (the health-check node port on its
// node port, 30000-32767, as the API server allocates them). The Accept
// header kpng sends is held in source.test.ts, where the fake API server
// records requests; here, the log says what each list was answered in.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { haveK8s, KubeApiServer } from "../../harness/kube-apiserver.ts";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";
import { tempDir, waitFor } from "./helpers.ts";
import { value } from "../../node/prom-text.ts";
import { buildBinary } from "../../../build.ts";

const root = join(import.meta.dir, "../../..");
const tmp = tempDir("kpng-e2e-");

/** The operator's flags: node-1 through KUBECONFIG, nft in dry-run, health on a free port, metrics on METRICS ("" for none), then EXTRA. */
const asNode1 = (kubeconfig: string, metrics: string, ...extra: string[]) => [
  ...["--kubeconfig", kubeconfig, "--backend", "nft", "--dry-run", "--hostname-override", "node-1"],
  ...["--healthz-bind-address", "127.0.0.1:0", "--metrics-bind-address", metrics, ...extra],
];

/** A running kpng whose stdout and stderr are collected as they come. */
class Kpng {
  out = "";
  err = "";
  readonly proc: ReturnType<typeof Bun.spawn>;
  constructor(args: string[]) {
    this.proc = Bun.spawn([process.execPath, join(root, "src/main.ts"), ...args], { cwd: root, stdout: "pipe", stderr: "pipe" });
    void this.collect(this.proc.stdout as ReadableStream<Uint8Array>, (t) => (this.out += t));
    void this.collect(this.proc.stderr as ReadableStream<Uint8Array>, (t) => (this.err += t));
  }
  private async collect(stream: ReadableStream<Uint8Array>, add: (t: string) => void) {
    const dec = new TextDecoder();
    for await (const chunk of stream) add(dec.decode(chunk, { stream: true }));
  }
  /** address of `what` ("healthz", "metrics") from the log */
  async address(what: string): Promise<string> {
    const m = await waitFor(`${what} address`, () => new RegExp(`serving ${what} address=(\\S+)`).exec(this.err), LOADED_WAIT_MS);
    return m[1];
  }
  syncs(): number {
    return (this.err.match(/ synced backend=nft /g) ?? []).length;
  }
  async stop() {
    this.proc.kill("SIGTERM");
    await this.proc.exited;
  }
}

/** curl -i: status, headers (lower-case), body. */
async function curl(url: string): Promise<{ code: number; headers: Record<string, string>; body: string }> {
  const p = Bun.spawn(["curl", "-s", "-i", "--max-time", "5", url], { stdout: "pipe", stderr: "pipe" });
  const text = await new Response(p.stdout).text();
  await p.exited;
  if (p.exitCode !== 0) return { code: 0, headers: {}, body: "" };
  const [head, ...rest] = text.split("\r\n\r\n");
  const lines = head.split("\r\n");
  const headers = Object.fromEntries(
    lines.slice(1).map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
  );
  return { code: Number(lines[0].split(" ")[1]), headers, body: rest.join("\r\n\r\n") };
}

const webLB = (hcPort: number) =>
  svc({
    name: "web",
    type: "LoadBalancer",
    eTP: "Local",
    healthCheckNodePort: hcPort,
    ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
    lbIngress: [{ ip: v4.external(1) }],
  });
const webEndpoints = (nodeName: string) => slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: nodeName }] });

/** A port of the node-port range nothing on this host listens on: the health-check node port kpng will open. */
function freeNodePort(): number {
  for (;;) {
    const port = 30000 + Math.floor(Math.random() * 2768);
    try {
      Bun.listen({ hostname: "0.0.0.0", port, socket: { data() {} } }).stop(true);
      return port;
    } catch {
      // taken: another
    }
  }
}

/** kpng's watches open, by its own count (the real API server does not say) */
const watching = async (n: number) => value((await curl(`${metrics}/metrics`)).body, "kpng_api_watchers") === n;

let api: KubeApiServer;
let kpng: Kpng;
let hcPort: number;
let healthz: string;
let metrics: string;
const real = haveK8s("kpng --kubeconfig against the real API server");

beforeAll(async () => {
  if (!real) return;
  api = await KubeApiServer.start();
  hcPort = freeNodePort();
  await api.apply(node("node-1", { ips: [v4.node(1)] }), webLB(hcPort), webEndpoints("node-1"));
  kpng = new Kpng(
    asNode1(
      api.writeKubeconfig(join(tmp.dir, "kubeconfig")),
      "127.0.0.1:0",
      "--nodeport-addresses",
      "127.0.0.0/8",
      "--min-sync-period",
      "100ms",
    ),
  );
  healthz = `http://${await kpng.address("healthz")}`;
  metrics = `http://${await kpng.address("metrics")}`;
  await waitFor("first sync", () => kpng.syncs() >= 1, LOADED_WAIT_MS);
  // the API server's start, kpng's addresses and first sync: loaded waits (LOADED_WAIT_MS)
}, 150_000);

afterAll(async () => {
  await kpng?.stop();
  await api?.close();
  tmp.remove();
});

describe.skipIf(!real)("kpng --kubeconfig K --backend nft --dry-run", () => {
  test("asks in kube-proxy's default content type, protobuf, and reads the answers in it: a streamed list of each kind", () => {
    expect(kpng.err.match(/ listed kind=\S+ .*via=watch .*as=protobuf/g)).toHaveLength(3);
  });

  test("prints the rules for what the API server holds", () => {
    expect(kpng.out).toContain("table ip kpng");
    expect(kpng.out).toContain(v4.clusterIP(10));
    expect(kpng.out).toContain(v4.external(1));
  });

  test("follows creates, updates and deletes", async () => {
    const ip = v4.clusterIP(40).replaceAll(".", "\\.");
    /** Applies a change, waits for the sync it causes, returns what that sync printed. */
    const step = async (change: () => Promise<void>) => {
      const [out, syncs] = [kpng.out.length, kpng.syncs()];
      await change();
      // The sync's log line and its printed rules travel on different pipes.
      await waitFor("a sync", () => kpng.syncs() > syncs && kpng.out.length > out);
      return kpng.out.slice(out);
    };
    const created = await step(() =>
      api.apply(svc({ name: "api", clusterIPs: [v4.clusterIP(40)], ports: [{ name: "http", port: 8080 }] })),
    );
    expect(created).toMatch(new RegExp(`add element .*${ip} \\. tcp \\. 8080`));
    const updated = await step(() =>
      api.apply(svc({ name: "api", clusterIPs: [v4.clusterIP(40)], ports: [{ name: "http", port: 8081 }] })),
    );
    expect(updated).toMatch(new RegExp(`add element .*${ip} \\. tcp \\. 8081`));
    expect(updated).toMatch(new RegExp(`delete element .*${ip} \\. tcp \\. 8080`));
    const deleted = await step(() => api.remove("Service", "default", "api"));
    expect(deleted).toMatch(new RegExp(`delete element .*${ip} \\. tcp \\. 8081`));
    expect(deleted).not.toMatch(/add element/);
  }, 90_000);

  test("the API server goes away and comes back: no rule churn meanwhile, following again after", async () => {
    await waitFor("watches open", () => watching(3));
    const out = kpng.out.length;
    const syncs = kpng.syncs();
    await api.stopApiServer();
    await waitFor("the outage seen", () => kpng.err.includes("keeping the last known state"), LOADED_WAIT_MS);
    expect(kpng.proc.exitCode).toBeNull();
    expect(kpng.err).toContain("keeping the last known state");
    expect((await curl(`${healthz}/healthz`)).code).toBe(200);
    await api.startApiServer();
    await waitFor("watches re-opened", () => watching(3), LOADED_WAIT_MS);
    await Bun.sleep(300);
    expect(kpng.syncs()).toBe(syncs);
    expect(kpng.out.length).toBe(out);
    const ip = v4.clusterIP(41);
    await api.apply(svc({ name: "after", clusterIPs: [ip] }));
    await waitFor("change after the outage printed", () => kpng.out.slice(out).includes(ip), LOADED_WAIT_MS);
  }, 210_000);
});

describe.skipIf(!real)("what curl sees", () => {
  test("/healthz and /livez: 200 with kube-proxy's JSON and headers", async () => {
    const h = await curl(`${healthz}/healthz`);
    expect(h.code).toBe(200);
    expect(h.headers["content-type"]).toBe("application/json");
    expect(h.headers["x-content-type-options"]).toBe("nosniff");
    expect(h.body).toMatch(
      /^\{"lastUpdated": "\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? \+0000 UTC m=\+\d+\.\d{9}","currentTime": "[^"]+", "nodeEligible": true\}$/,
    );
    const l = await curl(`${healthz}/livez`);
    expect(l.code).toBe(200);
    expect(Object.keys(JSON.parse(l.body))).toEqual(["lastUpdated", "currentTime"]);
  });

  test("a node the cluster autoscaler is deleting: /healthz 503 (drain me), /livez still 200", async () => {
    const tainted = {
      ...node("node-1", { ips: [v4.node(1)] }),
      spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler", value: "1700000000", effect: "NoSchedule" }] },
    };
    await api.apply(tainted);
    await waitFor("healthz 503", async () => (await curl(`${healthz}/healthz`)).code === 503);
    expect(JSON.parse((await curl(`${healthz}/healthz`)).body).nodeEligible).toBe(false);
    expect((await curl(`${healthz}/livez`)).code).toBe(200);
    await api.apply(node("node-1", { ips: [v4.node(1)] }));
    await waitFor("healthz 200 again", async () => (await curl(`${healthz}/healthz`)).code === 200);
  });

  test("/metrics: kube-proxy's names and kpng's own", async () => {
    const m = await curl(`${metrics}/metrics`);
    expect(m.code).toBe(200);
    for (const name of [
      "kubeproxy_sync_proxy_rules_duration_seconds_count",
      "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      "kubeproxy_sync_proxy_rules_service_changes_total",
      "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      'kubeproxy_proxy_healthz_total{code="200"}',
      'kpng_api_events_total{kind="Service"}',
      "kpng_node_revisions_total",
      "kpng_api_watchers 3",
      "process_resident_memory_bytes",
    ]) {
      expect(m.body).toContain(name);
    }
    expect((await curl(`${metrics}/proxyMode`)).body).toBe("nftables");
  });

  test("/metrics: what came before the servers started is counted: the lists, the first sync", async () => {
    const m = (await curl(`${metrics}/metrics`)).body;
    // the first sync (and any since) with its duration and time. The servers start after it, or by their deadline (a
    // second after the start) when the real API server's first lists take longer: which came first is not asserted.
    expect(value(m, 'kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"}')).toBeGreaterThanOrEqual(1);
    expect(value(m, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}')).toBeGreaterThan(0);
    // the lists of the three kinds, answered before the servers existed
    const host = new URL(api.url).host;
    expect(value(m, `rest_client_requests_total{code="200",method="GET",host="${host}"}`)).toBeGreaterThanOrEqual(3);
  });

  test("the health-check node port answers like kube-proxy's, and follows the endpoints", async () => {
    const hc = `http://127.0.0.1:${hcPort}/`;
    const ok = await curl(hc);
    expect([ok.code, ok.headers["x-load-balancing-endpoint-weight"], ok.headers["content-type"]]).toEqual([200, "1", "application/json"]);
    expect(JSON.parse(ok.body)).toEqual({ service: { namespace: "default", name: "web" }, localEndpoints: 1, serviceProxyHealthy: true });
    await api.apply(webEndpoints("node-2"));
    await waitFor("503", async () => (await curl(hc)).code === 503);
    const gone = await curl(hc);
    expect(gone.headers["x-load-balancing-endpoint-weight"]).toBe("0");
    await api.remove("Service", "default", "web");
    await waitFor("port closed", async () => (await curl(hc)).code === 0);
  });
});

describe.skipIf(!real)("an API server that is down when kpng starts", () => {
  test("health answers before any sync; rules come when the API server does", async () => {
    await api.apply(svc({ name: "late", clusterIPs: [v4.clusterIP(50)] }));
    const kubeconfig = api.writeKubeconfig(join(tmp.dir, "late-kubeconfig"));
    await api.stopApiServer();
    const p = new Kpng(asNode1(kubeconfig, ""));
    try {
      // With no first sync, the servers start by their deadline (a second after the start).
      const hz = `http://${await p.address("healthz")}`;
      expect(p.err).not.toContain(" synced backend=");
      await waitFor("a failed list", () => p.err.includes("list failed, keeping the last known state"), LOADED_WAIT_MS);
      // kube-proxy's rule: healthy while starting up.
      expect((await curl(`${hz}/healthz`)).code).toBe(200);
      expect((await curl(`${hz}/livez`)).code).toBe(200);
      expect(p.out).toBe("");
      await api.startApiServer();
      await waitFor("rules printed", () => p.out.includes(v4.clusterIP(50)), LOADED_WAIT_MS);
    } finally {
      await p.stop();
    }
  }, 150_000);
});

describe.skipIf(!real)("the compiled binary (bun run build)", () => {
  test("reaches the API server over TLS with the kubeconfig's CA and prints the rules", async () => {
    const bin = join(tmp.dir, "kpng");
    // As shipped: the compiled binary loads the kubeconfig and trusts its CA (the bundle must keep what the loader needs).
    await buildBinary(bin);
    // Not spawnSync: the API server lives in this process and must keep answering.
    const p = Bun.spawn(
      [
        bin,
        "--kubeconfig",
        api.writeKubeconfig(join(tmp.dir, "bin-kubeconfig")),
        "--backend",
        "nft",
        "--dry-run",
        "--once",
        "--hostname-override",
        "node-1",
      ],
      { cwd: tmp.dir, stdout: "pipe", stderr: "pipe", timeout: LOADED_WAIT_MS },
    );
    const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
    expect(err).toContain("listed kind=Service");
    expect(await p.exited).toBe(0);
    expect(out).toContain("table ip kpng");
  }, 90_000);
});
