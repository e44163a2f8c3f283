// detectLocalMode through the wiring, as a user runs kpng: `bun src/main.ts`
// with kube-proxy's flags, a cluster file, --dry-run --once; the rules the
// backends print say how pod traffic is told from the rest.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { webList } from "../fixtures/web-list.ts";
import { kpngSync } from "../harness/kpng-process.ts";

const dir = mkdtempSync(join(tmpdir(), "kpng-detect-local-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const kpng = (...args: string[]) => kpngSync(args);

/** A cluster file: Node node-a (with `podCIDRs`), a ClusterIP service with one endpoint. */
function clusterFile(name: string, podCIDRs?: string[]): string {
  const file = join(dir, name);
  const doc = webList({
    spec: podCIDRs ? { podCIDR: podCIDRs[0], podCIDRs } : {},
    status: { addresses: [{ type: "InternalIP", address: "203.0.113.1" }] },
  });
  writeFileSync(file, JSON.stringify(doc));
  return file;
}

const base = ["--node-name", "node-a", "--dry-run", "--once", "--cluster-cidr", "10.244.0.0/16"];

describe("detectLocalMode as the backends render it", () => {
  const withCIDRs = clusterFile("with.json", ["10.244.3.0/24", "fd00:10:244:3::/64"]);
  const cases: Array<{ name: string; flags: string[]; has: RegExp; hasNot?: RegExp }> = [
    {
      name: "nft, NodeCIDR: the Node's spec.podCIDRs, not the cluster CIDR",
      flags: ["--proxy-mode=nftables", "--detect-local-mode=NodeCIDR"],
      has: /ip daddr @cluster-ips ip saddr != 10\.244\.3\.0\/24 jump mark-for-masquerade/,
      hasNot: /10\.244\.0\.0\/16/,
    },
    {
      name: "iptables, NodeCIDR: the Node's spec.podCIDRs, not the cluster CIDR",
      flags: ["--proxy-mode=iptables", "--detect-local-mode=NodeCIDR"],
      has: /! -s 10\.244\.3\.0\/24 -j KPNG-MARK-MASQ/,
      hasNot: /10\.244\.0\.0\/16/,
    },
    {
      name: "nft, BridgeInterface",
      flags: ["--proxy-mode=nftables", "--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0"],
      has: /ip daddr @cluster-ips iifname != "cbr0" jump mark-for-masquerade/,
      hasNot: /saddr != 10\.244/,
    },
    {
      name: "iptables, InterfaceNamePrefix",
      flags: ["--proxy-mode=iptables", "--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"],
      has: /! -i veth\+ -j KPNG-MARK-MASQ/,
      hasNot: /-s 10\.244\.0\.0\/16/,
    },
    {
      name: "ClusterCIDR (the default): the cluster CIDR",
      flags: ["--proxy-mode=nftables"],
      has: /ip saddr != 10\.244\.0\.0\/16 jump mark-for-masquerade/,
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      const r = kpng("--input", withCIDRs, ...base, ...c.flags);
      expect(r.err).not.toContain("WARN");
      expect(r.code).toBe(0);
      expect(r.out).toMatch(c.has);
      if (c.hasNot) expect(r.out).not.toMatch(c.hasNot);
    });

  test("NodeCIDR, and the Node has no pod CIDRs: kpng does not start (exit 1), saying what it lacks", () => {
    const r = kpng("--input", clusterFile("without.json"), ...base, "--proxy-mode=nftables", "--detect-local-mode=NodeCIDR");
    expect(r.code).toBe(1);
    expect(r.out).toBe("");
    expect(r.err).toContain("node node-a spec.podCIDRs: none in the input; detectLocalMode NodeCIDR needs them");
  });
});

describe("detectLocalMode from a kube-proxy configuration file", () => {
  const withCIDRs = clusterFile("file-modes.json", ["10.244.3.0/24"]);
  const V1 = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/16\n";
  const V2 = "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\ndetectLocal:\n  clusterCIDRs: [10.244.0.0/16]\n";
  const config = (name: string, text: string) => {
    const file = join(dir, name);
    writeFileSync(file, text);
    return file;
  };
  const run = (file: string, ...flags: string[]) =>
    kpng("--config", file, "--input", withCIDRs, "--node-name", "node-a", "--dry-run", "--once", ...flags);

  test("v1alpha1: detectLocalMode BridgeInterface and detectLocal.bridgeInterface", () => {
    const r = run(
      config("v1-bridge.yaml", V1 + "mode: nftables\ndetectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: cbr0\n"),
    );
    expect(r.err).not.toContain("WARN");
    expect(r.code).toBe(0);
    expect(r.out).toContain('ip daddr @cluster-ips iifname != "cbr0" jump mark-for-masquerade');
  });
  test("v1alpha2: detectLocalMode InterfaceNamePrefix and detectLocal.interfaceNamePrefix", () => {
    const r = run(
      config(
        "v2-prefix.yaml",
        V2.replace("detectLocal:\n", "detectLocal:\n  interfaceNamePrefix: veth\n") +
          "mode: iptables\ndetectLocalMode: InterfaceNamePrefix\n",
      ),
    );
    expect(r.err).not.toContain("WARN");
    expect(r.code).toBe(0);
    expect(r.out).toContain("! -i veth+ -j KPNG-MARK-MASQ");
  });
  test("the file names the mode, the flag the bridge: both are read before the check", () => {
    const r = run(config("v1-mode-only.yaml", V1 + "mode: nftables\ndetectLocalMode: BridgeInterface\n"), "--pod-bridge-interface=cbr0");
    expect(r.code).toBe(0);
    expect(r.out).toContain('iifname != "cbr0"');
  });
  test("BridgeInterface without a bridge in the file: one line naming the field, exit 2", () => {
    const r = run(config("v1-empty.yaml", V1 + "detectLocalMode: BridgeInterface\n"));
    expect(r.code).toBe(2);
    expect(r.err.trim().split("\n")).toHaveLength(1);
    expect(r.err).toContain(
      "detectLocal.bridgeInterface (--pod-bridge-interface): must not be empty when detectLocalMode is BridgeInterface",
    );
  });
});
