// iptables.localhostNodePorts, as kube-proxy's iptables mode does it: with
// it on, route_localnet=1 is set in the node's namespace (never the host's),
// IPv4 node ports answer on 127.0.0.1 (masqueraded), and the guard rule
// drops what route_localnet would otherwise let in: a packet to 127.0.0.0/8
// arriving from another host. With it off, none of that. Real packets in
// namespaces; then the renderer's cases for nodePortAddresses.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { allowsIPv4Loopback, loopbackRefusals, nodePortMatches, renderFixed } from "../../plugins/iptables/render-fixed.ts";
import type { Config } from "../../src/core/config/config.ts";
import { loadedBound } from "../harness/load.ts";
import { pythonPath, saidReady, type Topology } from "../harness/netns.ts";
import { svc, testConfig, testContext, v4, v6 } from "./fixtures.ts";
import { createWorld, podEp, runChecks } from "./world.ts";

const martian = join(import.meta.dir, "../harness/martian.py");
const NODE_PORT = 30080;
const GUARD = "KPNG-LOCALNET-GUARD";
const on = (o: Partial<Config> = {}) => testConfig({ iptables: { localhostNodePorts: true }, ...o });
const off = (o: Partial<Config> = {}) => testConfig({ iptables: { localhostNodePorts: false }, ...o });

let topo: Topology;
let backend: IptablesBackend | undefined;

const hostRouteLocalnet = () => readFileSync("/proc/sys/net/ipv4/conf/all/route_localnet", "utf8").trim();
const nodeRouteLocalnet = async () => (await topo.exec(topo.node.ns, ["sysctl", "-n", "net.ipv4.conf.all.route_localnet"])).trim();

async function program(config: Config) {
  await backend?.close();
  backend = new IptablesBackend(testContext(config), { executor: topo.executor(topo.node.ns), monitorPeriodMs: 0 });
  await backend.setup();
  backend.setService(svc({ name: "np", clusterIPs: [v4.clusterIP(50)], ports: [{ name: "http", port: 80, nodePort: NODE_PORT }] }));
  backend.setEndpoint("default", "np", "ep0", podEp(topo, 0));
  await backend.sync();
}

/**
 * Whether any of three UDP datagrams to 127.0.0.1:9999, sent by the client
 * straight onto the node's link (its source: the client's address), reaches a
 * socket on the node's 127.0.0.1: the listener reports each one; after the
 * sender is done, up to 2 s more for its report, stretched by the load
 * (bounded by the sender, not by a guess at how long a loaded machine takes
 * to start it; on a loaded one the listener takes that much longer to print).
 */
async function martiansDelivered(): Promise<boolean> {
  const py = await pythonPath();
  const [link] = JSON.parse(await topo.exec(topo.node.ns, ["ip", "-j", "link", "show", "ext0"])) as { address: string }[];
  const listener = Bun.spawn(["ip", "netns", "exec", topo.node.ns, py, "-u", "-S", martian, "listen", "127.0.0.1", "9999"], {
    stdout: "pipe",
  });
  try {
    if (!(await saidReady(listener.stdout))) throw new Error("martian listener did not start");
    await topo.exec(topo.client.ns, [py, "-S", martian, "send", "eth0", link!.address, topo.client.v4, "127.0.0.1", "9999", "3"]);
    // saidReady read from the stream already: the rest through a reader of its own.
    const reader = listener.stdout.getReader();
    const report = (async () => {
      let text = "";
      for (let r = await reader.read(); !r.done; r = await reader.read()) {
        text += new TextDecoder().decode(r.value);
        if (text.includes("got")) return true;
      }
      return false;
    })();
    return await Promise.race([report, Bun.sleep(loadedBound(2000)).then(() => false)]);
  } finally {
    listener.kill();
    await listener.exited;
  }
}

beforeAll(async () => {
  topo = await createWorld(1);
});

afterAll(async () => {
  await backend?.close();
  await topo?.destroy();
});

describe("iptables.localhostNodePorts: real packets", () => {
  test("on: route_localnet=1 in the node's namespace only; 127.0.0.1:NODEPORT answers, masqueraded; the node IP still does", async () => {
    const host = hostRouteLocalnet();
    expect(await nodeRouteLocalnet()).toBe("0");
    await program(on());
    expect(await nodeRouteLocalnet()).toBe("1");
    expect(hostRouteLocalnet()).toBe(host);
    await runChecks(topo, [
      { from: "node", probe: { ip: "127.0.0.1", port: NODE_PORT }, expect: { ok: true, who: ["pod0"], source: "node" } },
      { from: "client", probe: { ip: topo.node.v4, port: NODE_PORT }, expect: { ok: true, who: ["pod0"] } },
    ]);
  });

  test("on: the guard drops a packet to 127.0.0.1 from another host, which route_localnet alone would deliver", async () => {
    await program(on());
    expect(await nodeRouteLocalnet()).toBe("1");
    expect(await martiansDelivered()).toBe(false);
    // The control: the same packets with the guard's rules flushed arrive, so the drop above was the guard's.
    await topo.exec(topo.node.ns, ["iptables", "-F", GUARD]);
    expect(await martiansDelivered()).toBe(true);
  });

  test("off: 127.0.0.1:NODEPORT is refused, the guard chain and its jumps are gone; the node IP answers", async () => {
    await program(off());
    await runChecks(topo, [
      { from: "node", probe: { ip: "127.0.0.1", port: NODE_PORT }, expect: { error: "refused" } },
      { from: "client", probe: { ip: topo.node.v4, port: NODE_PORT }, expect: { ok: true, who: ["pod0"] } },
    ]);
    expect(await topo.exec(topo.node.ns, ["iptables-save", "-t", "filter"])).not.toContain(GUARD);
  });
});

describe("localhost node ports: the renderer", () => {
  const guardRule = (c: Config) => renderFixed(c, "v4").rules.filter((r) => r.chain === GUARD);
  const local = ["-m", "addrtype", "--dst-type", "LOCAL"];
  const cases: { name: string; config: Config; v4: string[][]; v6: string[][]; guard: boolean; refusals?: number }[] = [
    {
      name: "on, nodePortAddresses unset: every local IPv4 address, loopback too",
      config: on(),
      v4: [local],
      v6: [["!", "-d", "::1", ...local]],
      guard: true,
    },
    {
      name: "off: loopback left out",
      config: off(),
      v4: [["!", "-d", "127.0.0.0/8", ...local]],
      v6: [["!", "-d", "::1", ...local]],
      guard: false,
    },
    {
      name: "iptables absent from Config (no kube-proxy document): off",
      config: testConfig(),
      v4: [["!", "-d", "127.0.0.0/8", ...local]],
      v6: [["!", "-d", "::1", ...local]],
      guard: false,
    },
    {
      name: "on, but nodePortAddresses primary: no loopback, no guard (upstream's ContainsIPv4Loopback)",
      config: on({ nodePortAddresses: ["primary"] }),
      v4: [["-d", v4.node(0)]],
      v6: [["-d", v6.node(0)]],
      guard: false,
    },
    {
      name: "on, nodePortAddresses 127.0.0.0/8: answers there, guarded",
      config: on({ nodePortAddresses: ["127.0.0.0/8"] }),
      v4: [["-d", "127.0.0.0/8", ...local]],
      v6: [],
      guard: true,
    },
    {
      name: "off, nodePortAddresses 127.0.0.0/8 and a node CIDR: loopback skipped, with kube-proxy's error",
      config: off({ nodePortAddresses: ["127.0.0.0/8", "198.18.0.0/24"] }),
      v4: [["-d", "198.18.0.0/24", ...local]],
      v6: [],
      guard: false,
      refusals: 1,
    },
    {
      name: "off, nodePortAddresses 0.0.0.0/0: every local address but loopback",
      config: off({ nodePortAddresses: ["0.0.0.0/0", "::/0"] }),
      v4: [["!", "-d", "127.0.0.0/8", ...local]],
      v6: [["!", "-d", "::1", ...local]],
      guard: false,
    },
    {
      name: "::1 never answers (IPv6 has no route_localnet)",
      config: on({ nodePortAddresses: ["::1/128"] }),
      v4: [],
      v6: [],
      guard: false,
      refusals: 1,
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      expect(nodePortMatches(c.config, "v4")).toEqual(c.v4);
      expect(nodePortMatches(c.config, "v6")).toEqual(c.v6);
      expect(guardRule(c.config).length).toBe(c.guard ? 1 : 0);
      expect(renderFixed(c.config, "v6").rules.filter((r) => r.chain === GUARD)).toEqual([]);
      expect(loopbackRefusals(c.config).length).toBe(c.refusals ?? 0);
    });

  test("allowsIPv4Loopback: a CIDR holding 127.0.0.0, or inside 127.0.0.0/8", () => {
    const with_ = (a: string[]) => allowsIPv4Loopback(testConfig({ nodePortAddresses: a }));
    expect([with_([]), with_(["127.0.0.1/32"]), with_(["0.0.0.0/0"]), with_(["primary"]), with_(["198.18.0.0/24"])]).toEqual([
      true,
      true,
      true,
      false,
      false,
    ]);
  });
});
