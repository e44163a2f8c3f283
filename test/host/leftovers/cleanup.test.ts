// `kpng --cleanup` on a node that has been everything: kpng with its iptables
// and its nft backend (run for real, --once), the real kube-proxy 1.36.2 in
// iptables mode with each iptables flavour (legacy, nft) and in nftables mode,
// dual-stack (a Service of each family), beside other software's rules, and
// IPVS mode's rules (written from kube-proxy's source: this kernel has no
// IPVS, see migrate.test.ts). One `kpng --cleanup`, with the default backend
// only, leaves nothing of kpng's (so kube-proxy, started next, finds nothing
// of kpng's) and nothing of kube-proxy's, and everyone else's rules as they were.
//
// The order is a node's history: IPVS mode, then iptables mode (which leaves
// IPVS mode's rules: kube-proxy removes them only when switching to
// nftables), then nftables mode with the iptables and ipset tools hidden from
// it, so that its start-up cleanup of the other modes leaves them for kpng.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startKpng, tempDir } from "../../harness/kpng-process.ts";
import { v4, v6 } from "../../fixtures/addresses.ts";
import { haveK8s, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { type IptablesFlavour, startKubeProxy } from "../../harness/kube-proxy.ts";
import { createTopology, type Topology } from "../../harness/netns.ts";
import { foreignIptables, foreignNft, ipvsModeIpsets, ipvsModeIptables, kpngIptablesLeft } from "./kube-proxy-rules.ts";
import {
  clusterObjects,
  foreignHeld,
  holdings,
  kpngHeld,
  kubeProxyHeld,
  kubeProxyServes,
  NODE,
  web6Objects,
  webService,
  writeCluster,
} from "./node.ts";

let topo: Topology;
const dir = tempDir("kpng-cleanup-");
const kpngIn = (args: string[]) => startKpng(args, { wrap: ["ip", "netns", "exec", topo.node.ns] });
const real = haveK8s("kpng --cleanup after the real kube-proxy");
const stops: Array<() => Promise<void>> = [];

beforeAll(async () => {
  if (!real) return;
  topo = await createTopology({ pods: 2, prefix: "kpc" });
  dir.create();
  const ns = topo.node.ns;
  const s = webService(topo);
  const input = writeCluster(topo, dir.path);
  // kpng's own rules, as its backends write them
  for (const backend of ["iptables", "nft"]) {
    const p = kpngIn(["--input", input, "--node-name", NODE, "--backend", backend, "--once"]);
    expect(await p.proc.exited).toBe(0);
  }
  // everyone else's, then kube-proxy's of every mode, flavour and family
  await topo.exec(ns, ["iptables-legacy-restore", "--noflush"], foreignIptables());
  await topo.exec(ns, ["iptables-legacy-restore", "--noflush"], kpngIptablesLeft);
  await topo.exec(ns, ["ip6tables-legacy-restore", "--noflush"], foreignIptables("v6"));
  await topo.exec(ns, ["iptables-nft-restore", "--noflush"], foreignIptables());
  await topo.exec(ns, ["ip6tables-nft-restore", "--noflush"], foreignIptables("v6"));
  await topo.exec(ns, ["nft", "-f", "-"], foreignNft);
  await topo.exec(ns, ["ipset", "-exist", "restore"], ipvsModeIpsets(s));
  await topo.exec(ns, ["iptables-nft-restore", "--noflush"], ipvsModeIptables(s));

  const api = await sharedApiServer();
  await api.apply(...clusterObjects(topo), ...web6Objects(topo));
  const unreach = await api.reach(ns);
  stops.push(unreach);
  const runs: Array<{ mode: "iptables" | "nftables"; iptables: IptablesFlavour }> = [
    { mode: "iptables", iptables: "legacy" },
    { mode: "iptables", iptables: "nft" },
    { mode: "nftables", iptables: "none" },
  ];
  for (const r of runs) {
    const kp = await startKubeProxy({ api, ns, mode: r.mode, nodeName: NODE, dir: dir.path, iptables: r.iptables });
    try {
      await kp.waitForRules((rules) => kubeProxyServes(r.mode, rules, [v4.clusterIP(10), v6.clusterIP(10)]));
    } finally {
      await kp.stop();
    }
  }
  await unreach();
  stops.pop();
}, 180_000);
afterAll(async () => {
  for (const s of stops) await s();
  await topo?.destroy();
  dir.remove();
});

describe.skipIf(!real)("kpng --cleanup on a node of every mode", () => {
  test("the node holds kpng's rules of two backends and kube-proxy's of three modes, two flavours, two families", async () => {
    const h = await holdings(topo);
    expect(kpngHeld(h)).toEqual(
      expect.arrayContaining([
        "table ip kpng",
        "table ip6 kpng",
        "iptables-nft nat KPNG-SERVICES",
        "iptables-legacy nat KPNG-SERVICES",
        "KPNG-HAIRPIN-V4",
      ]),
    );
    const kp = kubeProxyHeld(h);
    for (const where of [
      /^table ip kube-proxy$/,
      /^table ip6 kube-proxy$/,
      /^iptables-legacy nat KUBE-SVC-\w{16}$/,
      /^ip6tables-legacy nat KUBE-SEP-\w{16}$/,
      /^iptables-nft nat KUBE-EXT-\w{16}$/,
      /^ip6tables-nft nat KUBE-SVC-\w{16}$/,
      /^iptables-nft filter KUBE-IPVS-FILTER$/,
      /^ip6tables-nft filter KUBE-PROXY-FIREWALL$/,
      /^KUBE-CLUSTER-IP$/,
    ])
      expect(kp.filter((k) => where.test(k))).not.toEqual([]);
  });

  test("--dry-run prints every removal and changes nothing", async () => {
    const before = await holdings(topo);
    const p = kpngIn(["--cleanup", "--dry-run"]);
    expect(await p.proc.exited).toBe(0);
    const out = p.stdout.join("\n");
    for (const cmd of [
      "# nft -f -",
      "delete table ip kube-proxy",
      "delete table ip kpng",
      "# iptables-legacy-restore --noflush",
      "# ip6tables-nft-restore --noflush",
      "-X KPNG-SERVICES",
      "# ipset destroy KUBE-CLUSTER-IP",
    ])
      expect(out).toContain(cmd);
    expect(await holdings(topo)).toEqual(before);
  }, 90_000);

  test("one kpng --cleanup (default backend) removes all of it, kpng's and kube-proxy's; other software's stay", async () => {
    const p = kpngIn(["--cleanup"]);
    expect(await p.proc.exited).toBe(0);
    const h = await holdings(topo);
    expect(kpngHeld(h)).toEqual([]);
    expect(kubeProxyHeld(h)).toEqual([]);
    expect(foreignHeld(h)).toEqual({ kubelet: true, cni: true, firewall: true, kubeRouterIpset: true });
    // kubelet's chains in the other flavour and family too
    for (const where of [
      "iptables-legacy filter KUBE-FIREWALL",
      "ip6tables-legacy mangle KUBE-IPTABLES-HINT",
      "ip6tables-nft nat KUBE-KUBELET-CANARY",
    ])
      expect(h.chains).toContain(where);
  }, 90_000);

  test("a second --cleanup finds nothing to do and succeeds", async () => {
    const p = kpngIn(["--cleanup"]);
    expect(await p.proc.exited).toBe(0);
    expect(p.stderr.join("\n")).not.toContain("leftovers removed");
  }, 90_000);
});
