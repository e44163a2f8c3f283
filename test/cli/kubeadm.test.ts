// kpng started as kube-proxy's DaemonSet starts kube-proxy: kubeadm's argument
// list and ConfigMap (mode: "", zeros and nulls), and a hand-written
// DaemonSet's flags. The cluster comes from --input so that the run needs no
// API server; --dry-run --once prints the rules and exits.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dir, "../..");
const tmp = mkdtempSync(join(tmpdir(), "kpng-kubeadm-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const kpng = (args: string[]) => {
  const r = Bun.spawnSync(
    [process.execPath, join(root, "src/main.ts"), ...args, "--input", "examples/cluster.yaml", "--dry-run", "--once"],
    {
      cwd: root,
      env: { ...process.env, NODE_NAME: "node-1" },
    },
  );
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
};

/** kubeadm's kube-proxy DaemonSet: `command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override=$(NODE_NAME)]`. */
const kubeadmArgs = (config: string) => [`--config=${config}`, "--hostname-override=node-1"];
const KUBEADM_CONFIG = join(import.meta.dir, "../config/golden/kubeadm.v1alpha1.yaml");

describe("kubeadm's DaemonSet arguments and ConfigMap", () => {
  test('mode: "" starts iptables, as kube-proxy 1.36 on Linux, and says so', () => {
    const r = kpng(kubeadmArgs(KUBEADM_CONFIG));
    expect(r.err).not.toContain("kpng: [");
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/INFO kpng: proxy mode mode=iptables from=default/);
    expect(r.err).toMatch(/INFO kpng: started node=node-1 backends=iptables /);
    expect(r.out).toContain("*nat");
    // every field of kubeadm's file is acted on in iptables mode: localhostNodePorts (true) too, with upstream's guard rule
    expect(r.err.split("\n").filter((l) => l.includes(" WARN "))).toEqual([]);
    expect(r.out).toContain('-A KPNG-LOCALNET-GUARD -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8');
  });

  test("with kubeadm's usual -v=2 and an unknown field in the ConfigMap: lenient decoding, a warning, it runs", () => {
    const cfg = join(tmp, "config.conf");
    writeFileSync(cfg, readFileSync(KUBEADM_CONFIG, "utf8").replace('mode: ""', 'mode: ""\nfutureField: 1'));
    const r = kpng([...kubeadmArgs(cfg), "-v=2"]);
    expect(r.code).toBe(0);
    expect(r.err).toContain(`WARN kpng: ${cfg}: using lenient decoding as strict decoding failed: unknown field "futureField"`);
    expect(r.err).toMatch(/proxy mode mode=iptables from=default/);
  });

  test("the ConfigMap's mode: nftables starts nftables", () => {
    const cfg = join(tmp, "nft.conf");
    writeFileSync(cfg, readFileSync(KUBEADM_CONFIG, "utf8").replace('mode: ""', "mode: nftables"));
    const r = kpng(kubeadmArgs(cfg));
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/proxy mode mode=nftables from=config/);
    expect(r.out).toContain("table ip kpng");
  });
});

describe("a hand-written kube-proxy DaemonSet's flags", () => {
  test("accepted; those without effect named in one WARN line", () => {
    const r = kpng([
      "--v=2",
      "--proxy-mode=nftables",
      "--hostname-override=node-1",
      "--cluster-cidr=198.19.0.0/16",
      "--conntrack-max-per-core=0",
      "--oom-score-adj=-998",
      "--feature-gates=SomeGate=true",
      "--kube-api-qps=20",
      "--detect-local-mode=ClusterCIDR",
      "--healthz-bind-address=",
      "--metrics-bind-address=",
    ]);
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/proxy mode mode=nftables from=flag/);
    const warns = r.err.split("\n").filter((l) => l.includes(" WARN "));
    expect(warns).toEqual([
      expect.stringMatching(/WARN kpng: kube-proxy flags accepted with no effect in kpng: --feature-gates, --kube-api-qps$/),
    ]);
  });

  test("no --proxy-mode and no config: iptables, kube-proxy's default", () => {
    const r = kpng(["--hostname-override=node-1"]);
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/proxy mode mode=iptables from=default/);
  });
});
