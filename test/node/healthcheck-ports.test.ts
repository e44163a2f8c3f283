// Health-check node ports as the node-local state drives them: opened and
// closed with services, answering like kube-proxy, on 127.0.0.1 only.

import { afterEach, describe, expect, test } from "bun:test";
import { cidrContains, healthCheckAddresses, HealthCheckPorts } from "../../src/core/node/healthcheck-ports.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { K8sObject } from "../../src/core/brain/k8s/objects.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc, type EpOpts } from "../fixtures/k8s.ts";
import { localState } from "../brain/helpers.ts";
import { freePort } from "../fixtures/free-port.ts";
import { Brain } from "../../src/core/brain/brain.ts";
import { kinds } from "../../src/core/brain/k8s/objects.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { startProxyServers } from "../../src/core/node/proxy-servers.ts";

function lbLocal(
  port: number,
  endpoints: EpOpts[],
  o: { name?: string; eTP?: "Local" | "Cluster"; type?: "LoadBalancer" | "NodePort" } = {},
): K8sObject[] {
  const name = o.name ?? "web";
  return [
    svc({
      name,
      type: o.type ?? "LoadBalancer",
      eTP: o.eTP ?? "Local",
      healthCheckNodePort: port,
      ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }],
      lbIngress: [{ ip: v4.external(1) }],
    }),
    slice({ service: name, endpoints }),
  ];
}

const here = (i: number, extra: Partial<EpOpts> = {}): EpOpts => ({ ip: v4.pod(1, i), node: "node-1", ...extra });
const there = (i: number): EpOpts => ({ ip: v4.pod(2, i), node: "node-2" });

let ports: HealthCheckPorts | undefined;
afterEach(() => ports?.close());

function manager(healthy = () => true) {
  const log = memoryLogger();
  ports = new HealthCheckPorts({ addresses: ["127.0.0.1"], proxyHealthy: healthy, log });
  return { ports, log };
}

const get = (port: number) =>
  fetch(`http://127.0.0.1:${port}/`).then(async (r) => ({
    status: r.status,
    weight: r.headers.get("x-load-balancing-endpoint-weight"),
    type: r.headers.get("content-type"),
    body: await r.text(),
  }));
const refused = (port: number) =>
  fetch(`http://127.0.0.1:${port}/`).then(
    () => false,
    () => true,
  );

describe("health-check node ports", () => {
  const cases: Array<{ name: string; endpoints: EpOpts[]; healthy?: boolean; status: number; weight: string }> = [
    { name: "one local endpoint: 200, weight 1", endpoints: [here(5), there(6)], status: 200, weight: "1" },
    { name: "two local endpoints: 200, weight 2", endpoints: [here(5), here(7), there(6)], status: 200, weight: "2" },
    { name: "no local endpoint: 503, weight 0", endpoints: [there(6)], status: 503, weight: "0" },
    {
      name: "only a terminating local endpoint: 503 so the load balancer drains the node",
      endpoints: [here(5, { ready: false, serving: true, terminating: true }), there(6)],
      status: 503,
      weight: "0",
    },
    {
      name: "a not-ready local endpoint does not count",
      endpoints: [here(5, { ready: false, serving: false }), there(6)],
      status: 503,
      weight: "0",
    },
    { name: "proxy unhealthy: 503 even with local endpoints", endpoints: [here(5)], healthy: false, status: 503, weight: "1" },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const port = await freePort();
      const { ports } = manager(() => c.healthy ?? true);
      ports.update(localState([node("node-1"), ...lbLocal(port, c.endpoints)]));
      const r = await get(port);
      expect([r.status, r.weight, r.type]).toEqual([c.status, c.weight, "application/json"]);
      expect(JSON.parse(r.body)).toEqual({
        service: { namespace: "default", name: "web" },
        localEndpoints: Number(c.weight),
        serviceProxyHealthy: c.healthy ?? true,
      });
    });
  }

  test("the body is kube-proxy's dedented JSON, byte for byte", async () => {
    const port = await freePort();
    manager().ports.update(localState([node("node-1"), ...lbLocal(port, [here(5)])]));
    expect((await get(port)).body).toBe(
      '{\n\t"service": {\n\t\t"namespace": "default",\n\t\t"name": "web"\n\t},\n\t"localEndpoints": 1,\n\t"serviceProxyHealthy": true\n}',
    );
  });

  const none: Array<{ name: string; o: { eTP?: "Cluster"; type?: "NodePort" } }> = [
    { name: "eTP=Cluster: no health-check port", o: { eTP: "Cluster" } },
    { name: "NodePort with eTP=Local: no health-check port", o: { type: "NodePort" } },
  ];
  for (const c of none) {
    test(c.name, async () => {
      const port = await freePort();
      const { ports } = manager();
      ports.update(localState([node("node-1"), ...lbLocal(port, [here(5)], c.o)]));
      expect(ports.ports.size).toBe(0);
      expect(await refused(port)).toBe(true);
    });
  }

  test("follows the state: counts change in place, the port closes with the service, moves with the port", async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    const { ports } = manager();
    ports.update(localState([node("node-1"), ...lbLocal(p1, [there(6)])]));
    expect((await get(p1)).status).toBe(503);
    ports.update(localState([node("node-1"), ...lbLocal(p1, [here(5)])]));
    expect((await get(p1)).status).toBe(200);
    ports.update(localState([node("node-1"), ...lbLocal(p2, [here(5)])]));
    expect(await refused(p1)).toBe(true);
    expect((await get(p2)).status).toBe(200);
    ports.update(localState([node("node-1")]));
    expect(await refused(p2)).toBe(true);
    expect(ports.ports.size).toBe(0);
  });

  test("a change set touches only the services it names: others keep their servers and counts", async () => {
    const [p1, p2] = [await freePort(), await freePort()];
    const { ports } = manager();
    const both = (a: EpOpts[], b: EpOpts[]) =>
      localState([node("node-1"), ...lbLocal(p1, a, { name: "a" }), ...lbLocal(p2, b, { name: "b" })]);
    ports.update(both([there(6)], [there(6)]));
    expect([(await get(p1)).status, (await get(p2)).status]).toEqual([503, 503]);
    // both gained a local endpoint, but the change names only default/a: b is not looked at
    ports.update(both([here(5)], [here(7)]), new Set(["default/a"]));
    expect([(await get(p1)).status, (await get(p2)).status]).toEqual([200, 503]);
    ports.update(both([here(5)], [here(7)]), new Set(["default/b"]));
    expect([(await get(p1)).status, (await get(p2)).status]).toEqual([200, 200]);
    // a service named by the change and gone from the state: its port closes
    ports.update(localState([node("node-1"), ...lbLocal(p1, [here(5)], { name: "a" })]), new Set(["default/b"]));
    expect(await refused(p2)).toBe(true);
    expect([...ports.ports.keys()]).toEqual(["default/a"]);
  });

  test("a port someone else holds: logged, retried at the next update", async () => {
    const port = await freePort();
    const squatter = Bun.serve({ hostname: "127.0.0.1", port, fetch: () => new Response("mine") });
    const { ports, log } = manager();
    const state = localState([node("node-1"), ...lbLocal(port, [here(5)])]);
    ports.update(state);
    expect(ports.ports.size).toBe(0);
    expect(log.lines.some((l) => l.includes("failed to start health check") && l.includes("default/web"))).toBe(true);
    squatter.stop(true);
    ports.update(state);
    expect((await get(port)).status).toBe(200);
  });
});

describe("health-check ports follow the node's IPs (the wiring of the run command)", () => {
  test("a Node IP change in the brain moves the listening address; the old one stops answering", async () => {
    const port = await freePort();
    const brain = new Brain();
    const up = (object: K8sObject) => ({ type: "upsert" as const, object });
    brain.apply([up(node("node-1", { ips: ["127.0.0.1"] })), ...lbLocal(port, [here(5)]).map(up)]);
    for (const k of kinds) brain.markSynced(k);
    brain.flush();
    const servers = startProxyServers({
      cfg: defaultConfig({ nodeName: "node-1", healthzBindAddress: "", metricsBindAddress: "" }),
      brain,
      log: memoryLogger(),
      backends: ["nft"],
    });
    try {
      brain.view("node-1").subscribe((rev) => servers.queued(rev));
      expect((await fetch(`http://127.0.0.1:${port}/`)).status).toBe(200);
      // 127.0.0.2: another loopback address, local like a second node IP
      brain.apply([up(node("node-1", { ips: ["127.0.0.2"] }))]);
      brain.flush();
      expect((await fetch(`http://127.0.0.2:${port}/`)).status).toBe(200);
      expect(await refused(port)).toBe(true);
    } finally {
      servers.close();
    }
  });
});

describe("where health-check ports listen", () => {
  const host = ["127.0.0.1", "::1", "203.0.113.11", "198.19.1.1"];
  const cases: Array<{ name: string; npa: string[]; nodeIPs: string[]; want: string[] }> = [
    { name: "CIDRs select this host's addresses in them", npa: ["127.0.0.0/8"], nodeIPs: ["203.0.113.11"], want: ["127.0.0.1"] },
    { name: "IPv6 CIDRs too", npa: ["::1/128", "203.0.113.0/24"], nodeIPs: [], want: ["::1", "203.0.113.11"] },
    { name: '"primary" is the node IPs', npa: ["primary"], nodeIPs: ["203.0.113.11"], want: ["203.0.113.11"] },
    { name: "none given: the node IPs", npa: [], nodeIPs: ["203.0.113.11"], want: ["203.0.113.11"] },
    { name: "nothing known: every address", npa: [], nodeIPs: [], want: ["::"] },
  ];
  for (const c of cases)
    test(c.name, () => expect(healthCheckAddresses({ nodePortAddresses: c.npa, nodeIPs: c.nodeIPs, hostAddresses: host })).toEqual(c.want));

  test("CIDR containment", () => {
    expect([
      cidrContains("198.19.0.0/16", "198.19.255.1"),
      cidrContains("198.19.0.0/16", "198.20.0.1"),
      cidrContains("2001:db8:2::/56", "2001:db8:2:ff::1"),
      cidrContains("2001:db8:2::/56", "2001:db8:2:100::1"),
      cidrContains("0.0.0.0/0", "1.2.3.4"),
    ]).toEqual([true, false, true, false, true]);
  });
});
