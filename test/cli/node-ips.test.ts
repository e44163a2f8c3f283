// The node's IPs reach node ports through the wiring, as a user runs kpng:
// `bun src/main.ts` with user flags only, a cluster file, --dry-run --once.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { webList } from "../fixtures/web-list.ts";
import { kpngSync } from "../harness/kpng-process.ts";

const dir = mkdtempSync(join(tmpdir(), "kpng-node-ips-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const kpng = (...args: string[]) => kpngSync(args);

/** A cluster file: Node node-a with `addresses`, a NodePort service on 30080 with one endpoint elsewhere. */
function clusterFile(name: string, addresses: Array<{ type: string; address: string }>): string {
  const file = join(dir, name);
  writeFileSync(file, JSON.stringify(webList({ status: { addresses } }, 30080)));
  return file;
}

const nodePortElement = /^add element ip kpng service-nodeports \{ tcp \. 30080 /m;
const nodePortIPs = (out: string) => [...out.matchAll(/^add element ip6? kpng nodeport-ips \{ (.*) \}$/gm)].map((m) => m[1]);

describe("nft node ports with default flags", () => {
  const cases: Array<{ name: string; addresses: Array<{ type: string; address: string }>; flags?: string[]; want: string[] }> = [
    {
      name: "the Node's InternalIP answers node ports",
      addresses: [{ type: "InternalIP", address: "203.0.113.1" }],
      want: ["203.0.113.1"],
    },
    { name: "no InternalIP: the ExternalIP", addresses: [{ type: "ExternalIP", address: "198.51.100.1" }], want: ["198.51.100.1"] },
    {
      name: "dual-stack Node: one IP per family",
      addresses: [
        { type: "InternalIP", address: "203.0.113.1" },
        { type: "InternalIP", address: "2001:db8::1" },
      ],
      want: ["203.0.113.1", "2001:db8::1"],
    },
    {
      name: "--bind-address overrides the Node's IP of its family",
      addresses: [{ type: "InternalIP", address: "203.0.113.1" }],
      flags: ["--bind-address", "203.0.113.7"],
      want: ["203.0.113.7"],
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const file = clusterFile(`${c.name.replace(/\W+/g, "-")}.json`, c.addresses);
      const r = kpng("--input", file, "--node-name", "node-a", "--backend", "nft", "--dry-run", "--once", ...(c.flags ?? []));
      expect(r.err).not.toMatch(/^kpng: /m); // the CLI's error line
      expect(r.code).toBe(0);
      expect(r.err).toContain(`node IPs node=node-a ips=${c.want.join(",")}`);
      expect(nodePortIPs(r.out)).toEqual(c.want);
      expect(r.out).toMatch(nodePortElement);
    });
  }

  const configs: Array<{ name: string; text: string; want: string[] }> = [
    {
      name: "v1alpha1 bindAddress",
      text: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbindAddress: 203.0.113.7\n",
      want: ["203.0.113.7"],
    },
    {
      name: "v1alpha2 nodeIPOverride",
      text: "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nnodeIPOverride: [203.0.113.8]\n",
      want: ["203.0.113.8"],
    },
    {
      name: "v1alpha1 bindAddress 0.0.0.0 (its default): the Node's",
      text: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbindAddress: 0.0.0.0\n",
      want: ["203.0.113.1"],
    },
  ];
  for (const c of configs) {
    test(`--config with ${c.name}`, () => {
      const file = clusterFile(`config-${c.name.replace(/\W+/g, "-")}.json`, [{ type: "InternalIP", address: "203.0.113.1" }]);
      const config = join(dir, `${c.name.replace(/\W+/g, "-")}.yaml`);
      writeFileSync(config, c.text);
      const r = kpng("--config", config, "--input", file, "--node-name", "node-a", "--backend", "nft", "--dry-run", "--once");
      expect(r.err).not.toMatch(/^kpng: /m);
      expect(nodePortIPs(r.out)).toEqual(c.want);
    });
  }

  test("the README's command prints node-port elements", () => {
    const r = kpng("--input", "examples/cluster.yaml", "--node-name", "node-1", "--backend", "nft", "--dry-run", "--once");
    expect(r.code).toBe(0);
    expect(r.out).toContain("add element ip kpng nodeport-ips");
    expect(r.out).toContain("add element ip kpng service-nodeports");
  });

  test("a Node missing from the file: a warning, no node ports, and no wait (a file is the whole cluster)", () => {
    const file = clusterFile("other-node.json", [{ type: "InternalIP", address: "203.0.113.1" }]);
    const r = kpng("--input", file, "--node-name", "node-z", "--backend", "nft", "--dry-run", "--once");
    expect(r.code).toBe(0);
    // no wait: the line a wait begins with (a time bound would fail a loaded machine and pass a short wait)
    expect(r.err).not.toContain("waiting for the Node's InternalIP/ExternalIP");
    expect(r.err).toMatch(/WARN .*no addresses for this Node.*node=node-z/);
    expect(nodePortIPs(r.out)).toEqual([]);
  });
});

describe("iptables node ports follow upstream's default: every local address", () => {
  /** the iptables backend's dry run on a cluster file `name` whose node-a has the InternalIP 203.0.113.1, with `more` flags */
  const iptablesDryRun = (name: string, ...more: string[]) =>
    kpng(
      "--input",
      clusterFile(name, [{ type: "InternalIP", address: "203.0.113.1" }]),
      "--node-name",
      "node-a",
      "--backend",
      "iptables",
      "--dry-run",
      "--once",
      ...more,
    );
  test("no nodePortAddresses: --dst-type LOCAL, not the node IP (a node IP change needs no rule change)", () => {
    const r = iptablesDryRun("iptables.json");
    expect(r.code).toBe(0);
    // localhostNodePorts is on by default (kube-proxy's default): loopback answers too, as upstream's rule has it
    expect(r.out).toMatch(/-A KPNG-SERVICES -m comment --comment "[^"]*" -m addrtype --dst-type LOCAL -j KPNG-NODEPORTS/);
    expect(r.out).not.toMatch(/-d 203\.0\.113\.1 -j KPNG-NODEPORTS/);
  });

  test("with --iptables-localhost-nodeports=false, loopback is left out as upstream does", () => {
    const r = iptablesDryRun("iptables-nolocal.json", "--iptables-localhost-nodeports=false");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/-A KPNG-SERVICES .*! -d 127\.0\.0\.0\/8 -m addrtype --dst-type LOCAL -j KPNG-NODEPORTS/);
  });

  test('"primary" narrows to the Node\'s IP', () => {
    const r = iptablesDryRun("iptables-primary.json", "--nodeport-addresses", "primary");
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/-A KPNG-SERVICES .*-d 203\.0\.113\.1 -j KPNG-NODEPORTS/);
  });
});
