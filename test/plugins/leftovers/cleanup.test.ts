// `kpng --cleanup` on a node that has been everything: kpng with its iptables
// and its nft backend (run for real, --once), kube-proxy in each of its modes,
// in both iptables flavours (legacy and nft) and both families, beside other
// software's rules. One `kpng --cleanup`, with the default backend only,
// leaves nothing of kpng's (so kube-proxy, started next, finds nothing of
// kpng's) and nothing of kube-proxy's, and everyone else's rules as they were.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startKpng, tempDir } from "../../harness/kpng-process.ts";
import { v6 } from "../../fixtures/addresses.ts";
import { createTopology, type Topology } from "../../harness/netns.ts";
import {
  foreignIptables,
  foreignNft,
  iptablesMode,
  iptablesModeV6,
  ipvsModeIpsets,
  ipvsModeIptables,
  kpngIptablesLeft,
  nftablesMode,
} from "./kube-proxy-rules.ts";
import { foreignHeld, holdings, kpngHeld, kubeProxyHeld, NODE, webService, writeCluster } from "./node.ts";

let topo: Topology;
const dir = tempDir("kpng-cleanup-");
const kpngIn = (args: string[]) => startKpng(args, { wrap: ["ip", "netns", "exec", topo.node.ns] });

beforeAll(async () => {
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
  await topo.exec(ns, ["iptables-legacy-restore", "--noflush"], iptablesMode(s));
  await topo.exec(ns, ["iptables-legacy-restore", "--noflush"], kpngIptablesLeft);
  await topo.exec(ns, ["ip6tables-legacy-restore", "--noflush"], foreignIptables("v6"));
  await topo.exec(ns, ["ip6tables-legacy-restore", "--noflush"], iptablesModeV6(v6.clusterIP(10), v6.pod(0, 1)));
  await topo.exec(ns, ["iptables-nft-restore", "--noflush"], foreignIptables());
  await topo.exec(ns, ["ipset", "-exist", "restore"], ipvsModeIpsets(s));
  await topo.exec(ns, ["iptables-nft-restore", "--noflush"], ipvsModeIptables(s));
  await topo.exec(ns, ["ip6tables-nft-restore", "--noflush"], foreignIptables("v6"));
  await topo.exec(ns, ["ip6tables-nft-restore", "--noflush"], iptablesModeV6(v6.clusterIP(10), v6.pod(0, 1)));
  await topo.exec(ns, ["nft", "-f", "-"], nftablesMode(s) + foreignNft);
}, 60_000);
afterAll(async () => {
  await topo?.destroy();
  dir.remove();
});

describe("kpng --cleanup on a node of every mode", () => {
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
      "table ip kube-proxy",
      "iptables-legacy nat KUBE-SVC-WEBHTTP7Q4MVSDT6",
      "ip6tables-legacy nat KUBE-SERVICES",
      "iptables-nft filter KUBE-IPVS-FILTER",
      "ip6tables-nft nat KUBE-SEP-V6PODAAAAAAAAAAA",
      "KUBE-CLUSTER-IP",
    ])
      expect(kp).toContain(where);
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
  }, 30_000);

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
  }, 30_000);

  test("a second --cleanup finds nothing to do and succeeds", async () => {
    const p = kpngIn(["--cleanup"]);
    expect(await p.proc.exited).toBe(0);
    expect(p.stderr.join("\n")).not.toContain("leftovers removed");
  }, 30_000);
});
