// Two proxies on one node, as deployed: the whole kpng process (the flags a
// DaemonSet passes) serves `default/web` from the real API server in the
// node's namespace; then the real kube-proxy 1.36.2 starts in the same
// namespace (a kube-proxy DaemonSet re-installed by `kubeadm upgrade`, or
// never removed) and programs its rules beside kpng's. kpng must say so: a
// WARN naming what it saw, and kpng_foreign_proxy_detected at 1 on /metrics
// for that proxy, rule flavour and family. It must not fight: kube-proxy's
// rules stay, kpng's too, the Service keeps answering, and /healthz stays 200
// (src/host/leftovers/foreign.ts says why).
//
// One case per way kube-proxy writes rules: nftables mode (table ip
// kube-proxy), iptables mode through iptables-nft and through iptables-legacy
// (its KUBE-PROXY-CANARY chain in mangle).

import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { LOADED_WAIT_MS, startKpng, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";
import { haveK8s, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { type IptablesFlavour, startKubeProxy } from "../../harness/kube-proxy.ts";
import { createTopology, type Topology } from "../../harness/netns.ts";
import { clusterObjects, holdings, kpngHeld, kubeProxyHeld, kubeProxyServes, NODE, webService } from "./node.ts";

/** kpng's servers, away from kube-proxy's defaults (127.0.0.1:10249 and :10256 in the namespace: the harness gives them to kube-proxy) */
const METRICS = "127.0.0.1:10259";
const HEALTHZ = "127.0.0.1:10266";

interface Case {
  backend: "nft" | "iptables";
  mode: "nftables" | "iptables";
  iptables: IptablesFlavour;
  /** the label kpng reports, and the object its WARN names */
  rules: "nftables" | "iptables-nft" | "iptables-legacy";
  saw: string;
}

const cases: Case[] = [
  { backend: "nft", mode: "nftables", iptables: "nft", rules: "nftables", saw: "table ip kube-proxy" },
  { backend: "iptables", mode: "iptables", iptables: "nft", rules: "iptables-nft", saw: "chain mangle KUBE-PROXY-CANARY" },
  { backend: "nft", mode: "iptables", iptables: "legacy", rules: "iptables-legacy", saw: "chain mangle KUBE-PROXY-CANARY" },
];

/** the series of `name` on kpng's /metrics: labels (as text, sorted) -> value */
async function series(topo: Topology, name: string): Promise<Map<string, number>> {
  const text = await topo.exec(topo.node.ns, ["curl", "-sf", `http://${METRICS}/metrics`]);
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = new RegExp(`^${name}\\{([^}]*)\\} (\\S+)$`).exec(line);
    if (m) out.set(m[1].split(",").sort().join(","), Number(m[2]));
  }
  return out;
}

const labels = (rules: string, family: "IPv4" | "IPv6") => `ip_family="${family}",proxy="kube-proxy",rules="${rules}"`;
const warned = /WARN .*another proxy is programming this node/;

const real = haveK8s("kube-proxy started beside a running kpng");

describe.skipIf(!real).each(cases)("kpng --backend $backend, then kube-proxy in $mode mode ($iptables iptables)", (c) => {
  const dir = tempDir("kpng-two-proxies-");
  const cleanups: Array<() => Promise<unknown>> = [];
  afterAll(async () => {
    for (const f of cleanups.reverse()) await f().catch(() => {});
    dir.remove();
  });

  test("kpng warns, names what it saw, sets kpng_foreign_proxy_detected, and leaves kube-proxy's rules", async () => {
    const topo = await createTopology({ pods: 2, prefix: "kp2" });
    cleanups.push(() => topo.destroy());
    dir.create();
    const api = await sharedApiServer();
    for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
    await api.apply(...clusterObjects(topo));
    cleanups.push(await api.reach(topo.node.ns));
    const s = webService(topo);

    const kubeconfig = api.writeKubeconfig(join(dir.path, "kpng.kubeconfig"), { server: "https://127.0.0.1:6443" });
    const kpng: KpngProcess = startKpng(
      [
        "--kubeconfig",
        kubeconfig,
        "--node-name",
        NODE,
        "--backend",
        c.backend,
        "--metrics-bind-address",
        METRICS,
        "--healthz-bind-address",
        HEALTHZ,
      ],
      { wrap: ["ip", "netns", "exec", topo.node.ns] },
    );
    cleanups.push(() => kpng.stop("SIGKILL"));
    await kpng.waitFor(/ INFO kpng: synced /);
    // the watch runs, and has seen nothing: every sign it looks for is at 0
    let before = new Map<string, number>();
    for (const end = Date.now() + LOADED_WAIT_MS; Date.now() < end && before.size === 0; await Bun.sleep(200))
      before = await series(topo, "kpng_foreign_proxy_detected").catch(() => new Map());
    expect(before.get(labels(c.rules, "IPv4"))).toBe(0);
    expect([...before.values()].every((v) => v === 0)).toBe(true);
    expect([...kpng.stdout, ...kpng.stderr].some((l) => warned.test(l))).toBe(false);

    const kp = await startKubeProxy({ api, ns: topo.node.ns, mode: c.mode, nodeName: NODE, dir: dir.path, iptables: c.iptables });
    cleanups.push(() => kp.stop());
    await kp.waitForRules((r) => kubeProxyServes(c.mode, r, [s.clusterIP]));

    const warning = await kpng.waitFor(warned);
    expect(warning).toContain(`rules=${c.rules}`);
    expect(warning).toContain(`saw="${c.saw}"`);
    let now = new Map<string, number>();
    for (const end = Date.now() + LOADED_WAIT_MS; Date.now() < end && now.get(labels(c.rules, "IPv4")) !== 1; await Bun.sleep(200))
      now = await series(topo, "kpng_foreign_proxy_detected");
    expect(now.get(labels(c.rules, "IPv4"))).toBe(1);

    // not fought: a few of kpng's checks later both rule sets are there, and the Service answers
    await Bun.sleep(12_000);
    const h = await holdings(topo);
    expect(kubeProxyHeld(h).length).toBeGreaterThan(0);
    expect(kpngHeld(h).length).toBeGreaterThan(0);
    expect(await kp.rules()).toContain(s.clusterIP);
    for (const r of await topo.probeMany(topo.client.ns, [
      { ip: s.clusterIP, port: 80 },
      { ip: s.nodeIP, port: s.nodePort },
    ]))
      expect(r.ok ? r.who : r.error).toMatch(/^pod[01]$/);
    // said once, not every period
    expect([...kpng.stdout, ...kpng.stderr].filter((l) => warned.test(l) && l.includes(`rules=${c.rules} family=IPv4`)).length).toBe(1);
    // kpng's own rules are current: /healthz stays 200
    expect(await topo.exec(topo.node.ns, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", `http://${HEALTHZ}/healthz`])).toBe("200");
    // five loaded waits (kube-proxy's rules among them) and the 12 s of checks
  }, 360_000);
});
