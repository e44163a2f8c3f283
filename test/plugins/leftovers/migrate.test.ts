// A node where kube-proxy ran, in each of its modes, taken over by the whole
// kpng process as an operator starts it (`--input`, `--node-name`,
// `--backend`), in a network namespace with real packets: a client probes the
// Service continuously from before kpng starts (kube-proxy's rules answer)
// until after kube-proxy's rules are gone (kpng's answer), and no probe may
// fail. Then `kpng --cleanup` removes everything of both, and nothing answers.
//
// IPVS mode: this kernel has no IPVS (and no dummy links), so kube-ipvs0 is a
// bridge holding the cluster IP and a server on the node stands in for IPVS
// answering there; the sweep keeps that bridge (not IPVS mode's dummy) and
// removes IPVS mode's iptables rules and ipsets. Virtual servers and the dummy
// device are covered by plan.test.ts against a recorder.

import { afterAll, describe, expect, test } from "bun:test";
import { startKpng, tempDir, type KpngProcess } from "../../harness/kpng-process.ts";
import { continuousProbe } from "../../deployed/rig.ts";
import { createTopology, type Probe, type Topology } from "../../harness/netns.ts";
import { foreignIptables, foreignNft, iptablesMode, ipvsModeIpsets, ipvsModeIptables, nftablesMode } from "./kube-proxy-rules.ts";
import { foreignHeld, holdings, kpngHeld, kubeProxyHeld, NODE, webService, writeCluster } from "./node.ts";

type Mode = "iptables" | "nftables" | "ipvs";

interface Case {
  mode: Mode;
  /** kpng's backend taking over */
  backend: "nft" | "iptables";
  /** loads kube-proxy's rules of this mode into the node namespace */
  load(topo: Topology): Promise<void>;
  /** the node port answers through kube-proxy's rules too */
  nodePort: boolean;
}

const cases: Case[] = [
  {
    // kpng inserts its KPNG-SERVICES jumps at the head of nat PREROUTING/OUTPUT, in front of KUBE-SERVICES
    mode: "iptables",
    backend: "iptables",
    nodePort: true,
    load: async (topo) => {
      await topo.exec(topo.node.ns, ["iptables-restore", "--noflush"], iptablesMode(webService(topo)));
    },
  },
  {
    // table ip kube-proxy and table ip kpng both DNAT at priority -100: the first registered (kube-proxy's) wins until it goes
    mode: "nftables",
    backend: "nft",
    nodePort: true,
    load: async (topo) => {
      await topo.exec(topo.node.ns, ["nft", "-f", "-"], nftablesMode(webService(topo)));
    },
  },
  {
    mode: "ipvs",
    backend: "nft",
    nodePort: false,
    load: async (topo) => {
      const s = webService(topo);
      await topo.exec(topo.node.ns, ["ipset", "-exist", "restore"], ipvsModeIpsets(s));
      await topo.exec(topo.node.ns, ["iptables-restore", "--noflush"], ipvsModeIptables(s));
      // loaded again after a cleanup: the bridge (kept, not a dummy) and the stand-in are still there
      if (
        await topo.exec(topo.node.ns, ["ip", "link", "show", "kube-ipvs0"]).then(
          () => true,
          () => false,
        )
      )
        return;
      await topo.exec(topo.node.ns, ["ip", "link", "add", "kube-ipvs0", "type", "bridge"]);
      await topo.exec(topo.node.ns, ["ip", "addr", "add", `${s.clusterIP}/32`, "dev", "kube-ipvs0"]);
      await topo.exec(topo.node.ns, ["ip", "link", "set", "kube-ipvs0", "up"]);
      // IPVS's stand-in: answers on the cluster IP bound to kube-ipvs0
      await topo.serve({ ...topo.node, name: "ipvs" }, { tcp: [80] });
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

for (const c of cases)
  describe(`kube-proxy in ${c.mode} mode -> kpng --backend ${c.backend}`, () => {
    const dir = tempDir("kpng-migrate-");
    let topo: Topology | undefined;
    let kpng: KpngProcess | undefined;
    afterAll(async () => {
      await kpng?.stop("SIGKILL");
      if (topo) await topo.stopServer({ ...topo.node, name: "ipvs" });
      await topo?.destroy();
      dir.remove();
    });

    test("the Service answers throughout the takeover; kube-proxy's rules are gone after it, other software's kept", async () => {
      topo = await createTopology({ pods: 2, prefix: "kpm" });
      dir.create();
      for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
      await loadForeign(topo);
      await c.load(topo);
      const s = webService(topo);
      const probes: Probe[] = [{ ip: s.clusterIP, port: 80 }, ...(c.nodePort ? [{ ip: s.nodeIP, port: s.nodePort }] : [])];
      // before kpng: kube-proxy's rules (IPVS: its stand-in) answer
      for (const r of await topo.probeMany(topo.client.ns, probes)) expect(r.ok ? r.who : r.error).toMatch(/^(pod\d|ipvs)$/);

      const probe = await continuousProbe(topo, probes);
      kpng = startKpng(["--input", writeCluster(topo, dir.path), "--node-name", NODE, "--backend", c.backend], {
        wrap: ["ip", "netns", "exec", topo.node.ns],
      });
      await kpng.waitFor(/ INFO kpng: synced /, 30_000);
      const removed = await kpng.waitFor(/leftovers removed/, 30_000);
      await Bun.sleep(500); // a few more rounds over kpng's rules alone
      const run = await probe.stop();

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
    }, 90_000);

    test("kpng --cleanup removes kpng's rules and kube-proxy's; other software's stay, and the Service no longer answers", async () => {
      const t = topo!;
      await kpng!.stop("SIGTERM");
      // kube-proxy's rules again (a node rolled back and forth), beside kpng's
      await c.load(t);
      expect(kubeProxyHeld(await holdings(t)).length).toBeGreaterThan(0);
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
    }, 60_000);
  });
