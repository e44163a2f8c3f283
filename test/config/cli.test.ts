// --config and --write-config-to through the real command line: migration,
// flags over the file, exit code 2 with one line for bad configuration.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { EXAMPLE_NODE_1 } from "../harness/kpng-process.ts";

const root = join(import.meta.dir, "../..");
const golden = join(import.meta.dir, "golden");
const tmp = mkdtempSync(join(tmpdir(), "kpng-config-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const kpng = (...args: string[]) => {
  const r = Bun.spawnSync([process.execPath, join(root, "src/main.ts"), ...args], {
    cwd: root,
    env: { ...process.env, NODE_NAME: "cli-test-node" },
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString().trim() };
};
const file = (name: string, text: string) => {
  const p = join(tmp, name);
  writeFileSync(p, text);
  return p;
};

describe("--config FILE --write-config-to FILE", () => {
  test("--write-config-version v1alpha2 migrates a v1alpha1 file to the golden v1alpha2 and exits 0", () => {
    const out = join(tmp, "ipvs-migrated.yaml");
    const r = kpng("--config", join(golden, "ipvs.v1alpha1.yaml"), "--write-config-to", out, "--write-config-version", "v1alpha2");
    expect(r.code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(readFileSync(join(golden, "ipvs.out.yaml"), "utf8"));
  });

  test("without --config: kube-proxy's defaults as v1alpha1 (what every kube-proxy reads), and no hostname baked in", () => {
    const out = join(tmp, "defaults.yaml");
    expect(kpng("--write-config-to", out).code).toBe(0);
    const doc = parse(readFileSync(out, "utf8"));
    expect(doc.apiVersion).toBe("kubeproxy.config.k8s.io/v1alpha1");
    expect(doc.hostnameOverride).toBe("");
    const want = join(golden, "defaults.written.yaml");
    if (process.env.UPDATE_GOLDEN) writeFileSync(want, readFileSync(out, "utf8"));
    expect(readFileSync(out, "utf8")).toBe(readFileSync(want, "utf8"));
  });

  test("v1alpha2 written as v1alpha1: what v1alpha1 cannot hold is named in a warning", () => {
    const cfg = file(
      "dual.yaml",
      "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nnodeIPOverride: [203.0.113.11, 2001:db8:3::b]\nipFamilyPolicy: PreferDualStack\n",
    );
    const out = join(tmp, "dual-v1.yaml");
    const r = kpng("--config", cfg, "--write-config-to", out, "--write-config-version", "v1alpha1");
    expect(r.code).toBe(0);
    expect(r.err).toContain(
      "WARN kpng: written as kubeproxy.config.k8s.io/v1alpha1, which has no place for: nodeIPOverride[1] (2001:db8:3::b), ipFamilyPolicy (PreferDualStack) (--write-config-version v1alpha2 keeps them)",
    );
    expect(parse(readFileSync(out, "utf8")).bindAddress).toBe("203.0.113.11");
  });

  test("the file's apiVersion is kept: v1alpha1 in, v1alpha1 out; v1alpha2 in, v1alpha2 out", () => {
    for (const [input, apiVersion] of [
      ["nftables.v1alpha1.yaml", "v1alpha1"],
      ["restructured.v1alpha2.yaml", "v1alpha2"],
    ]) {
      const out = join(tmp, `kept-${apiVersion}.yaml`);
      expect(kpng("--config", join(golden, input), "--write-config-to", out).code).toBe(0);
      expect(parse(readFileSync(out, "utf8")).apiVersion).toBe(`kubeproxy.config.k8s.io/${apiVersion}`);
    }
  });

  test("explicit kube-proxy flags win over the file, and are written", () => {
    const out = join(tmp, "flags.yaml");
    const r = kpng(
      "--config",
      join(golden, "nftables.v1alpha1.yaml"),
      "--cluster-cidr",
      "198.19.0.0/17",
      "--proxy-mode",
      "iptables",
      "--hostname-override",
      "node-9",
      "--masquerade-all",
      "--nodeport-addresses",
      "203.0.113.0/24",
      "--metrics-bind-address",
      "127.0.0.1:10999",
      "--healthz-bind-address",
      "[::1]:10998",
      "--min-sync-period",
      "3s",
      "--iptables-masquerade-bit",
      "7",
      "--conntrack-max-per-core",
      "0",
      "--conntrack-tcp-timeout-close-wait=30m",
      "-v",
      "3",
      "--write-config-to",
      out,
      "--write-config-version=v1alpha2",
    );
    expect(r.err).not.toContain("ERROR");
    expect(r.code).toBe(0);
    const doc = parse(readFileSync(out, "utf8"));
    expect(doc.detectLocal.clusterCIDRs).toEqual(["198.19.0.0/17"]);
    expect(doc.mode).toBe("iptables");
    expect(doc.hostnameOverride).toBe("node-9");
    expect(doc.linux.masqueradeAll).toBe(true);
    expect(doc.nodePortAddresses).toEqual(["203.0.113.0/24"]);
    expect([doc.metricsBindAddress, doc.healthzBindAddress, doc.minSyncPeriod, doc.iptables.masqueradeBit]).toEqual([
      "127.0.0.1:10999",
      "[::1]:10998",
      "3s",
      7,
    ]);
    expect([doc.linux.conntrack.maxPerCore, doc.linux.conntrack.tcpCloseWaitTimeout, doc.logging.verbosity]).toEqual([0, "30m0s", 3]);
    // what no flag touched still comes from the file
    expect(doc.nodeIPOverride).toEqual(["203.0.113.11"]);
    expect(doc.syncPeriod).toBe("45s");
  });

  test("configHardFail: false: a warning on stderr, and it runs", () => {
    const cfg = file(
      "soft.yaml",
      "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nconfigHardFail: false\nfrobnicate: 1\n",
    );
    const r = kpng("--config", cfg, "--write-config-to", join(tmp, "soft-out.yaml"));
    expect(r.code).toBe(0);
    expect(r.err).toContain("WARN kpng: " + cfg + ": frobnicate: unknown field (ignored: configHardFail is false)");
  });
});

describe("the file's mode picks the backend", () => {
  test("mode: ipvs runs the ipvs backend, with upstream's deprecation warning", () => {
    const cfg = file("ipvs-mode.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n");
    const r = kpng("--config", cfg, "--input", "examples/cluster.yaml", "--node-name", "node-1", "--dry-run", "--once");
    expect(r.code).toBe(0);
    expect(r.err).toContain("The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead.");
    expect(r.err).toContain("backends=ipvs");
  });

  test("--proxy-mode wins over the file, with kube-proxy's mode names", () => {
    const cfg = file("ipvs-mode2.yaml", "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n");
    const r = kpng("--config", cfg, "--proxy-mode", "nftables", ...EXAMPLE_NODE_1, "--dry-run", "--once");
    expect(r.code).toBe(0);
    expect(r.err).toContain("backends=nft");
    expect(r.err).not.toContain("deprecated");
  });
});

describe("bad configuration: one line on stderr, exit code 2", () => {
  const V2 = "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n";
  const cases: Array<{ name: string; args: () => string[]; stderr: RegExp }> = [
    {
      name: "invalid field in the file",
      args: () => ["--config", file("bad-bit.yaml", V2 + "nftables:\n  masqueradeBit: 99\n")],
      stderr: /bad-bit\.yaml: nftables\.masqueradeBit: 99 is out of range \[0, 31\]/,
    },
    {
      name: "unknown field in the file",
      args: () => ["--config", file("bad-field.yaml", V2 + "iptabels: {}\n")],
      stderr: /bad-field\.yaml: iptabels: unknown field/,
    },
    { name: "missing file", args: () => ["--config", join(tmp, "nope.yaml")], stderr: /nope\.yaml: cannot read config file: ENOENT/ },
    {
      name: "unwritable --write-config-to",
      args: () => ["--write-config-to", join(tmp, "no-such-dir", "out.yaml")],
      stderr: /flag --write-config-to: cannot write .*out\.yaml: ENOENT/,
    },
    {
      name: "--healthz-bind-address with a name",
      args: () => ["--healthz-bind-address", "localhost:10256"],
      stderr: /flag --healthz-bind-address: "localhost:10256" must be IP:port/,
    },
    {
      name: "--iptables-masquerade-bit out of range",
      args: () => ["--iptables-masquerade-bit", "32"],
      stderr: /flag --iptables-masquerade-bit: "32" is out of range \[0, 31\]/,
    },
    {
      name: "--min-sync-period not a duration",
      args: () => ["--min-sync-period", "soon"],
      stderr: /flag --min-sync-period: "soon" is not a duration/,
    },
    {
      name: "--min-sync-period above --sync-period",
      args: () => ["--sync-period", "2s", "--min-sync-period", "5s"],
      stderr: /flag --min-sync-period: 5s must not be greater than the sync period \(2s\)/,
    },
    {
      name: "--cluster-cidr with two of one family",
      args: () => ["--cluster-cidr", "198.19.0.0/16,198.18.0.0/16"],
      stderr: /flag --cluster-cidr: .* must hold at most one CIDR per IP family/,
    },
    {
      name: "--ipvs-scheduler unknown",
      args: () => ["--ipvs-scheduler", "fastest"],
      stderr: /flag --ipvs-scheduler: "fastest" must be one of/,
    },
    {
      name: "--write-config-version unknown",
      args: () => ["--write-config-version", "v2", "--write-config-to", join(tmp, "never2.yaml")],
      stderr: /flag --write-config-version: "v2" must be v1alpha1 or v1alpha2/,
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const args = c.args();
      // --write-config-to makes a valid configuration exit at once instead of running.
      const r = kpng(...args, ...(args.includes("--write-config-to") ? [] : ["--write-config-to", join(tmp, "never.yaml")]));
      expect(r.code).toBe(2);
      expect(r.err.split("\n")).toHaveLength(1);
      expect(r.err).toMatch(c.stderr);
    });
  }

  test("--master not a URL (when the source starts)", () => {
    const r = kpng("--master", "api.example:6443", "--once", "--dry-run", "--healthz-bind-address", "", "--metrics-bind-address", "");
    expect(r.code).toBe(2);
    expect(r.err.split("\n").filter((l) => l.startsWith("kpng: "))).toEqual([
      expect.stringMatching(/flag --master: "api\.example:6443" is not an http\(s\) URL/),
    ]);
  });
});
