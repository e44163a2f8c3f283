// A node where kube-proxy runs, taken over by kpng as a DaemonSet swap does
// it: the real kube-proxy 1.36.2 (test/harness/kube-proxy.ts) serves
// `default/web` from the real API server in the node's network namespace and
// programs its real rules; a client probes the Service continuously from then
// on; kube-proxy is stopped (its pod deleted: SIGTERM, its rules stay); kpng
// starts with an operator's flags (`--kubeconfig`, `--node-name`,
// `--backend`), takes over and removes kube-proxy's leftovers; no probe may
// fail. Then kube-proxy runs once more (a node rolled back and forth) and
// `kpng --cleanup` removes everything of both, and nothing answers.
//
// IPVS mode cannot run here: this kernel has no IPVS (kube-proxy in ipvs mode
// exits: the last test here), and no dummy links. Its case keeps
// kube-proxy's rules written from its source (kube-proxy-rules.ts):
// kube-ipvs0 is a bridge holding the cluster IP and a server on the node
// stands in for IPVS answering there; the sweep keeps that bridge (not IPVS
// mode's dummy) and removes IPVS mode's iptables rules and ipsets. Virtual
// servers and the dummy device are covered by plan.test.ts against a recorder.

import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { continuousProbe } from "../../deployed/rig.ts";
import { LOADED_WAIT_MS, startKpng, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { startKubeProxy } from "../../harness/kube-proxy.ts";
import { createTopology, type Probe, type Topology } from "../../harness/netns.ts";
import { foreignIptables, foreignNft, ipvsModeIpsets, ipvsModeIptables } from "./kube-proxy-rules.ts";
import { clusterObjects, foreignHeld, holdings, kpngHeld, kubeProxyHeld, NODE, webService } from "./node.ts";

type Mode = "iptables" | "nftables" | "ipvs";

interface Ctx {
  topo: Topology;
  api: KubeApiServer;
  dir: string;
}

interface Case {
  mode: Mode;
  /** kpng's backend taking over */
  backend: "nft" | "iptables";
  /** kube-proxy of this mode programs the node; resolves once its rules serve the Service, with its stop */
  run(ctx: Ctx): Promise<() => Promise<void>>;
  /** the node port answers through kube-proxy's rules too */
  nodePort: boolean;
}

/** the real kube-proxy in `mode`, until its rules hold the Service's cluster IP and node port */
const realKubeProxy =
  (mode: "iptables" | "nftables", programmed: (rules: string, s: ReturnType<typeof webService>) => boolean) =>
  async ({ topo, api, dir }: Ctx) => {
    const kp = await startKubeProxy({ api, ns: topo.node.ns, mode, nodeName: NODE, dir, iptables: "nft" });
    try {
      await kp.waitForRules((r) => programmed(r, webService(topo)));
    } catch (err) {
      await kp.stop();
      throw err;
    }
    return async () => {
      await kp.stop();
    };
  };

const cases: Case[] = [
  {
    // kpng inserts its KPNG-SERVICES jumps at the head of nat PREROUTING/OUTPUT, in front of KUBE-SERVICES
    mode: "iptables",
    backend: "iptables",
    nodePort: true,
    run: realKubeProxy(
      "iptables",
      (r, s) =>
        r.includes(`-A KUBE-SERVICES -d ${s.clusterIP}/32 -p tcp -m comment --comment "default/web:http cluster IP"`) &&
        new RegExp(`-A KUBE-NODEPORTS -p tcp .*--dport ${s.nodePort} -j KUBE-EXT-`).test(r),
    ),
  },
  {
    // table ip kube-proxy and table ip kpng both DNAT at priority dstnat: the first registered (kube-proxy's) wins until it goes
    mode: "nftables",
    backend: "nft",
    nodePort: true,
    run: realKubeProxy(
      "nftables",
      (r, s) => r.includes(`${s.clusterIP} . tcp . 80 : goto service-`) && r.includes(`tcp . ${s.nodePort} : goto external-`),
    ),
  },
  {
    mode: "ipvs",
    backend: "nft",
    nodePort: false,
    run: async ({ topo }) => {
      const s = webService(topo);
      await topo.exec(topo.node.ns, ["ipset", "-exist", "restore"], ipvsModeIpsets(s));
      await topo.exec(topo.node.ns, ["iptables-restore", "--noflush"], ipvsModeIptables(s));
      // loaded again after a cleanup: the bridge (kept, not a dummy) and the stand-in are still there
      const haveBridge = await topo.exec(topo.node.ns, ["ip", "link", "show", "kube-ipvs0"]).then(
        () => true,
        () => false,
      );
      if (!haveBridge) {
        await topo.exec(topo.node.ns, ["ip", "link", "add", "kube-ipvs0", "type", "bridge"]);
        await topo.exec(topo.node.ns, ["ip", "addr", "add", `${s.clusterIP}/32`, "dev", "kube-ipvs0"]);
        await topo.exec(topo.node.ns, ["ip", "link", "set", "kube-ipvs0", "up"]);
        // IPVS's stand-in: answers on the cluster IP bound to kube-ipvs0
        await topo.serve({ ...topo.node, name: "ipvs" }, { tcp: [80] });
      }
      return async () => {};
    },
  },
];

/** the rules of other software every node carries beside kube-proxy's */
async function loadForeign(topo: Topology) {
  await topo.exec(topo.node.ns, ["iptables-restore", "--noflush"], foreignIptables());
  await topo.exec(topo.node.ns, ["nft", "-f", "-"], foreignNft);
  await topo.exec(topo.node.ns, ["ipset", "create", "KUBE-SRC-RN7WVLPO", "hash:ip"]);
}

const answered = (verdict: string) => /^(pod\d|ipvs)$/.test(verdict);

const real = haveK8s("migration from the real kube-proxy");

describe.skipIf(!real).each(cases)("kube-proxy in $mode mode -> kpng --backend $backend", (c) => {
  const dir = tempDir("kpng-migrate-");
  let ctx: Ctx | undefined;
  let kpng: KpngProcess | undefined;
  const stops: Array<() => Promise<void>> = [];
  afterAll(async () => {
    await kpng?.stop("SIGKILL");
    for (const s of stops.reverse()) await s();
    if (ctx) await ctx.topo.stopServer({ ...ctx.topo.node, name: "ipvs" });
    await ctx?.topo.destroy();
    dir.remove();
  });

  test("the Service answers throughout the swap; kube-proxy's rules are gone after it, other software's kept", async () => {
    const topo = await createTopology({ pods: 2, prefix: "kpm" });
    dir.create();
    const api = await sharedApiServer();
    ctx = { topo, api, dir: dir.path };
    for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
    await loadForeign(topo);
    await api.apply(...clusterObjects(topo));
    stops.push(await api.reach(topo.node.ns));
    const stopKubeProxy = await c.run(ctx);
    stops.push(stopKubeProxy);

    const s = webService(topo);
    const probes: Probe[] = [{ ip: s.clusterIP, port: 80 }, ...(c.nodePort ? [{ ip: s.nodeIP, port: s.nodePort }] : [])];
    // before kpng: kube-proxy's rules (IPVS: its stand-in) answer, and other software's rules are as they were
    for (const r of await topo.probeMany(topo.client.ns, probes)) expect(r.ok ? r.who : r.error).toMatch(/^(pod\d|ipvs)$/);
    expect(foreignHeld(await holdings(topo))).toEqual({ kubelet: true, cni: true, firewall: true, kubeRouterIpset: true });

    const probe = await continuousProbe(topo, probes);
    // the DaemonSet swap: kube-proxy's pod goes (its rules stay, still answering), kpng's comes
    await stopKubeProxy();
    const left = kubeProxyHeld(await holdings(topo));
    const kubeconfig = api.writeKubeconfig(join(dir.path, "kpng.kubeconfig"), { server: "https://127.0.0.1:6443" });
    kpng = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", c.backend], {
      wrap: ["ip", "netns", "exec", topo.node.ns],
    });
    await kpng.waitFor(/ INFO kpng: synced /);
    const removed = await kpng.waitFor(/leftovers removed/);
    await Bun.sleep(500); // a few more rounds over kpng's rules alone
    const run = await probe.stop();

    expect(left.length).toBeGreaterThan(0);
    expect(run.failures).toEqual([]);
    expect(run.rounds).toBeGreaterThan(5);
    // every probe answered through the whole run, and ended on kpng's rules (a pod)
    for (const t of run.timeline) {
      expect(t.every(([, v]) => answered(v))).toBe(true);
      expect(t.at(-1)![1]).toMatch(/^pod\d$/);
    }
    expect(removed).toContain("owners=kube-proxy");

    const h = await holdings(topo);
    expect(kubeProxyHeld(h)).toEqual([]);
    expect(kpngHeld(h).length).toBeGreaterThan(0);
    expect(foreignHeld(h)).toEqual({ kubelet: true, cni: true, firewall: true, kubeRouterIpset: true });
    if (c.mode === "ipvs") {
      expect(h.links).toContain("kube-ipvs0"); // a bridge: not IPVS mode's dummy, so not kube-proxy's
      expect(kpng.stderr.join("\n")).toContain("not IPVS mode's dummy");
    }
    // three loaded waits: kube-proxy's rules, kpng's sync, the leftovers removed
  }, 270_000);

  test("kpng --cleanup removes kpng's rules and kube-proxy's; other software's stay, and the Service no longer answers", async () => {
    const t = ctx!.topo;
    await kpng!.stop("SIGTERM");
    // kube-proxy again (a node rolled back and forth): its rules beside kpng's
    const stop = await c.run(ctx!);
    await stop();
    expect(kubeProxyHeld(await holdings(t)).length).toBeGreaterThan(0);
    expect(kpngHeld(await holdings(t)).length).toBeGreaterThan(0);
    const cleanup = startKpng(["--cleanup", "--backend", c.backend], { wrap: ["ip", "netns", "exec", t.node.ns] });
    expect(await cleanup.proc.exited).toBe(0);

    const h = await holdings(t);
    expect(kubeProxyHeld(h)).toEqual([]);
    expect(kpngHeld(h)).toEqual([]);
    expect(foreignHeld(h)).toEqual({ kubelet: true, cni: true, firewall: true, kubeRouterIpset: true });
    const s = webService(t);
    const r = await t.probe(t.client.ns, { ip: s.clusterIP, port: 80, timeout: 0.5 });
    // nothing DNATs any more: the client reaches no pod (IPVS mode: the stand-in on the kept bridge still answers)
    if (c.mode === "ipvs") expect(r.ok && r.who).toBe("ipvs");
    else expect(r.ok).toBe(false);
  }, 150_000);
});

describe.skipIf(!real)("kube-proxy in ipvs mode here", () => {
  const dir = tempDir("kpng-migrate-ipvs-");
  afterAll(() => dir.remove());

  test("this kernel has no IPVS: kube-proxy refuses to start (why its case above loads rules written from kube-proxy's source)", async () => {
    const topo = await createTopology({ pods: 1, prefix: "kpv" });
    try {
      const api = await sharedApiServer();
      await api.apply(...clusterObjects(topo).filter((o) => o.kind === "Node"));
      const stop = await api.reach(topo.node.ns);
      const kp = await startKubeProxy({ api, ns: topo.node.ns, mode: "ipvs", nodeName: NODE, dir: dir.create() });
      // kube-proxy checks IPVS only once its informer of this Node has synced through the forward and
      // the Node has its IPs (NewNodeManager, pkg/proxy/node.go, before createProxier): on a loaded
      // machine that first step, the API server's, is where the time goes (a list that fails is
      // retried after a backoff of up to 30 s), so it is waited for as a step of its own.
      await kp.waitForLog(/Successfully retrieved NodeIPs/, LOADED_WAIT_MS);
      const ended = await Promise.race([kp.proc.exited, Bun.sleep(LOADED_WAIT_MS).then(() => "still running")]);
      const log = kp.log.slice(-30).join("\n");
      await kp.stop();
      await stop();
      // should this fail (a kernel with IPVS), the ipvs case can run the real kube-proxy too
      expect({ ended, log: ended === 1 ? "" : log }).toEqual({ ended: 1, log: "" });
      expect(kp.log.join("\n")).toContain("can't use the IPVS proxier: ipvs not supported");
    } finally {
      await topo.destroy();
    }
  }, 150_000);
});
