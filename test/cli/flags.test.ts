// kube-proxy's command line, as an operator's DaemonSet passes it: pflag's
// syntax (a table for the parser), every kube-proxy 1.36 flag accepted by the
// real process, one WARN line for those without effect, errors as one line
// with exit code 2, --help and --version.

import { describe, expect, test } from "bun:test";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgv, type FlagDefs } from "../../src/core/config/argv.ts";
import { KpngError } from "../../src/core/errors.ts";
import pkg from "../../package.json" with { type: "json" };

const root = join(import.meta.dir, "../..");
const kpng = (...args: string[]) => {
  const r = Bun.spawnSync([process.execPath, join(root, "src/main.ts"), ...args], {
    cwd: root,
    env: { ...process.env, NODE_NAME: "cli-test-node" },
  });
  return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString().trim() };
};

const defs: FlagDefs = {
  "node-name": { type: "string", alias: ["hostname-override"] },
  backend: { type: "string", alias: ["proxy-mode"] },
  "masquerade-all": { type: "boolean" },
  v: { type: "string", alias: ["v"] },
  output: { type: "string", alias: ["o"] },
  help: { type: "boolean", alias: ["h"] },
  version: { type: "string", noOptDefVal: "true" },
};

describe("pflag's syntax", () => {
  const cases: Array<{ name: string; argv: string[]; args?: Record<string, unknown>; raw?: string[]; error?: RegExp }> = [
    { name: "--name=value", argv: ["--node-name=a"], args: { "node-name": "a" } },
    { name: "--name value", argv: ["--node-name", "a"], args: { "node-name": "a" } },
    { name: "--name value where the value starts with a dash (pflag takes it)", argv: ["--node-name", "-x"], args: { "node-name": "-x" } },
    {
      name: "a long alias lands on the canonical name",
      argv: ["--hostname-override=b"],
      args: { "node-name": "b" },
      raw: ["--node-name=b"],
    },
    { name: "--bool", argv: ["--masquerade-all"], args: { "masquerade-all": true } },
    { name: "--bool=false", argv: ["--masquerade-all=false"], args: { "masquerade-all": false } },
    { name: "--bool=1 (strconv.ParseBool)", argv: ["--masquerade-all=1"], args: { "masquerade-all": true } },
    { name: "--bool=yes is refused", argv: ["--masquerade-all=yes"], error: /flag --masquerade-all: invalid argument "yes"/ },
    { name: "-v N", argv: ["-v", "2"], args: { v: "2" } },
    { name: "-v=N", argv: ["-v=4"], args: { v: "4" } },
    { name: "-vN", argv: ["-v3"], args: { v: "3" } },
    { name: "--v=N", argv: ["--v=2"], args: { v: "2" } },
    { name: "-o yaml", argv: ["-o", "yaml"], args: { output: "yaml" } },
    { name: "-h", argv: ["-h"], args: { help: true } },
    { name: "--version alone", argv: ["--version"], args: { version: "true" } },
    { name: "--version=raw", argv: ["--version=raw"], args: { version: "raw" } },
    {
      name: "repeated flags keep every value, in order",
      argv: ["--backend=nft", "--proxy-mode", "iptables"],
      args: { backend: "iptables" },
      raw: ["--backend=nft", "--backend=iptables"],
    },
    { name: "-- ends the flags", argv: ["--masquerade-all", "--"], args: { "masquerade-all": true } },
    {
      name: "a single-dash long flag is an error, not shorthands",
      argv: ["-hostname-override=node-1"],
      error: /^\[invalid_argument\] flag -hostname-override: long flags take two dashes: --hostname-override$/,
    },
    {
      name: "a single-dash unknown word",
      argv: ["-frobnicate"],
      error: /flag -frobnicate: unknown shorthand flag 'f' \(long flags take two dashes\)/,
    },
    { name: "a boolean shorthand with more letters", argv: ["-hx"], error: /flag -hx: unknown shorthand flag 'x'/ },
    { name: "a positional argument", argv: ["--masquerade-all", "node-1"], error: /unexpected argument "node-1": kpng takes flags only/ },
    { name: "an argument after --", argv: ["--", "x"], error: /unexpected argument "x"/ },
    {
      name: "--bool false: false is a positional argument (as pflag)",
      argv: ["--masquerade-all", "false"],
      error: /unexpected argument "false"/,
    },
    { name: "an unknown flag", argv: ["--frobnicate=1"], error: /flag --frobnicate: unknown flag/ },
    { name: "a value missing at the end", argv: ["--node-name"], error: /flag --node-name: needs an argument/ },
  ];
  for (const c of cases) {
    test(c.name, () => {
      if (c.error) {
        expect(() => parseArgv(c.argv, defs)).toThrow(KpngError);
        expect(() => parseArgv(c.argv, defs)).toThrow(c.error);
        return;
      }
      const p = parseArgv(c.argv, defs);
      expect(p.args).toMatchObject(c.args!);
      if (c.raw) expect(p.rawArgs).toEqual(c.raw);
    });
  }
});

// kube-proxy 1.36's --help on Linux (cmd/kube-proxy/app/options.go and component-base's logging flags), with a value each.
const KUBE_PROXY_FLAGS: string[] = [
  "--bind-address=0.0.0.0",
  "--bind-address-hard-fail=false",
  "--cleanup=false",
  "--cluster-cidr=198.19.0.0/16",
  "--config-sync-period=15m0s",
  "--conntrack-max-per-core=32768",
  "--conntrack-min=131072",
  "--conntrack-tcp-be-liberal=false",
  "--conntrack-tcp-timeout-close-wait=1h0m0s",
  "--conntrack-tcp-timeout-established=24h0m0s",
  "--conntrack-udp-timeout=0s",
  "--conntrack-udp-timeout-stream=0s",
  "--detect-local-mode=ClusterCIDR",
  "--feature-gates=SomeGate=true",
  "--healthz-bind-address=0.0.0.0:10256",
  "--healthz-port=10256",
  "--hostname-override=node-1",
  "--init-only=false",
  "--iptables-localhost-nodeports=true",
  "--iptables-masquerade-bit=14",
  "--iptables-min-sync-period=1s",
  "--iptables-sync-period=30s",
  "--ipvs-exclude-cidrs=203.0.113.0/24",
  "--ipvs-min-sync-period=0s",
  "--ipvs-scheduler=rr",
  "--ipvs-strict-arp=false",
  "--ipvs-sync-period=30s",
  "--ipvs-tcp-timeout=0s",
  "--ipvs-tcpfin-timeout=0s",
  "--ipvs-udp-timeout=0s",
  "--kube-api-burst=10",
  "--kube-api-content-type=application/vnd.kubernetes.protobuf",
  "--kube-api-qps=5",
  "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
  "--log-flush-frequency=5s",
  "--log-json-info-buffer-size=0",
  "--log-json-split-stream=false",
  "--log-text-info-buffer-size=0",
  "--log-text-split-stream=false",
  "--logging-format=text",
  "--masquerade-all=false",
  "--master=https://203.0.113.1:6443",
  "--metrics-bind-address=127.0.0.1:10249",
  "--metrics-port=10249",
  "--nodeport-addresses=203.0.113.0/24",
  "--oom-score-adj=-999",
  "--pod-bridge-interface=cbr0",
  "--pod-interface-name-prefix=veth",
  "--profiling=false",
  "--proxy-mode=iptables",
  "--show-hidden-metrics-for-version=1.35",
  "--v=2",
  "--vmodule=proxier=4",
  "--write-config-to=PLACEHOLDER",
  "--config=",
  "--help=false",
  "--version=false",
];

describe("every kube-proxy 1.36 flag, as the real process reads it", () => {
  test("all of them at once are accepted (exit 0), those without effect named in one WARN line", () => {
    const out = join(tmpdir(), `kpng-flags-${process.pid}.yaml`);
    try {
      const r = kpng(
        ...KUBE_PROXY_FLAGS.map((f) => (f.startsWith("--write-config-to=") ? `--write-config-to=${out}` : f)).filter(
          (f) => f !== "--config=",
        ),
      );
      expect(r.err).not.toContain("kpng: [");
      expect(r.code).toBe(0);
      const warn = r.err.split("\n").filter((l) => l.includes("WARN kpng: kube-proxy flags accepted with no effect"));
      expect(warn).toHaveLength(1);
      for (const f of [
        "--feature-gates",
        "--kube-api-qps",
        "--kube-api-burst",
        "--profiling",
        "--vmodule",
        "--config-sync-period",
        "--log-flush-frequency",
      ])
        expect(warn[0]).toContain(f);
      for (const f of [
        "--conntrack-max-per-core",
        "--hostname-override",
        "--v,",
        "--oom-score-adj",
        "--detect-local-mode",
        "--pod-bridge-interface",
        "--pod-interface-name-prefix",
        "--kube-api-content-type",
        // honoured since issue 34
        "--iptables-localhost-nodeports",
        "--ipvs-strict-arp",
        "--ipvs-exclude-cidrs",
        "--ipvs-tcp-timeout",
        "--ipvs-tcpfin-timeout",
        "--ipvs-udp-timeout",
      ])
        expect(warn[0]).not.toContain(f);
    } finally {
      Bun.spawnSync(["rm", "-f", out]);
    }
  });

  test("--detect-local-mode=NodeCIDR and the interface modes are honoured: no WARN", () => {
    for (const args of [
      ["--detect-local-mode=NodeCIDR"],
      ["--detect-local-mode=BridgeInterface", "--pod-bridge-interface=cbr0"],
      ["--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"],
    ]) {
      const r = kpng(...args, "--write-config-to=/dev/null");
      expect(r.code).toBe(0);
      expect(r.err.split("\n").filter((l) => l.includes(" WARN "))).toEqual([]);
    }
  });

  // The value checks are a table in test/config/flags.test.ts; here, that the process turns them into one line and exit 2.
  const bad: Array<{ name: string; args: string[]; stderr: RegExp }> = [
    {
      name: "a single-dash long flag (silently the wrong node before)",
      args: ["-hostname-override=node-1"],
      stderr: /^kpng: \[invalid_argument\] flag -hostname-override: long flags take two dashes: --hostname-override$/,
    },
    {
      name: "a stray positional argument",
      args: ["--hostname-override", "node-1", "iptables"],
      stderr: /^kpng: \[invalid_argument\] unexpected argument "iptables"/,
    },
    {
      name: "--logging-format unknown",
      args: ["--logging-format=xml"],
      stderr: /^kpng: \[invalid_argument\] flag --logging-format: "xml" must be one of text, json$/,
    },
    {
      name: "--kube-api-content-type kpng cannot read",
      args: ["--kube-api-content-type=application/cbor"],
      stderr:
        /^kpng: \[invalid_argument\] flag --kube-api-content-type: "application\/cbor": kpng reads application\/json and application\/vnd\.kubernetes\.protobuf only$/,
    },
    {
      name: "--detect-local-mode=BridgeInterface without --pod-bridge-interface",
      args: ["--detect-local-mode=BridgeInterface"],
      stderr:
        /^kpng: \[invalid_argument\] detectLocal\.bridgeInterface \(--pod-bridge-interface\): must not be empty when detectLocalMode is BridgeInterface$/,
    },
    {
      name: "--detect-local-mode=InterfaceNamePrefix with an empty --pod-interface-name-prefix",
      args: ["--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix="],
      stderr:
        /^kpng: \[invalid_argument\] detectLocal\.interfaceNamePrefix \(--pod-interface-name-prefix\): must not be empty when detectLocalMode is InterfaceNamePrefix$/,
    },
    {
      name: "--pod-bridge-interface no interface can be named",
      args: ["--detect-local-mode=BridgeInterface", '--pod-bridge-interface=br"0'],
      stderr: /^kpng: \[invalid_argument\] detectLocal\.bridgeInterface \(--pod-bridge-interface\): "br"0" is not an interface name/,
    },
    { name: "an unknown flag", args: ["--frobnicate"], stderr: /^kpng: \[invalid_argument\] flag --frobnicate: unknown flag$/ },
    {
      name: "a word an object inherits is no subcommand",
      args: ["toString"],
      stderr: /^kpng: \[invalid_argument\] unexpected argument "toString"/,
    },
  ];
  for (const c of bad) {
    test(`${c.name}: one line, exit 2`, () => {
      const r = kpng(...c.args, "--write-config-to=/dev/null");
      expect(r.code).toBe(2);
      expect(r.err.split("\n")).toHaveLength(1);
      expect(r.err).toMatch(c.stderr);
    });
  }
});

describe("kube-proxy's modes on the command line", () => {
  const example = join(root, "examples/cluster.yaml");
  test("--detect-local-mode=BridgeInterface without a bridge: kpng does not start, one line, exit 2", () => {
    for (const mode of ["nftables", "iptables"]) {
      const r = kpng("--input", example, `--proxy-mode=${mode}`, "--detect-local-mode=BridgeInterface", "--dry-run", "--once");
      expect(r.code).toBe(2);
      expect(r.err.split("\n")).toHaveLength(1);
      expect(r.err).toContain("detectLocal.bridgeInterface (--pod-bridge-interface): must not be empty");
    }
  });

  test("--proxy-mode=kernelspace on Linux without --dry-run: one line, exit 2 (it would program nothing)", () => {
    const r = kpng("--input", example, "--proxy-mode=kernelspace", "--once");
    expect(r.code).toBe(2);
    expect(r.err.split("\n")).toHaveLength(1);
    expect(r.err).toMatch(
      /^kpng: \[invalid_argument\] mode kernelspace \(--backend winkernel\) programs Windows HNS and this node runs linux/,
    );
    // with --dry-run it prints the HNS calls it would make
    expect(kpng("--input", example, "--proxy-mode=kernelspace", "--dry-run", "--once")).toMatchObject({ code: 0 });
  });

  test("--proxy-mode given twice: the last one wins, one backend runs", () => {
    const r = kpng("--input", example, "--proxy-mode=iptables", "--proxy-mode", "nftables", "--dry-run", "--once");
    expect(r.code).toBe(0);
    expect(r.err).toMatch(/INFO kpng: proxy mode mode=nftables from=flag/);
    expect(r.out).toContain("add table ip kpng");
    expect(r.out).not.toContain("*nat");
  });
});

describe("--help and --version", () => {
  test("--help: double-dash flags, the -v shorthand, the subcommands, kube-proxy's no-effect flags apart", () => {
    const r = kpng("--help");
    expect(r.code).toBe(0);
    expect(r.out).toContain("--node-name, --hostname-override string");
    expect(r.out).toMatch(/^ {2}-v, --v int /m);
    expect(r.out).toMatch(/^ {6}--conntrack-max-per-core int32 /m);
    expect(r.out).not.toMatch(/(^|\s)-[a-z]{2,}/m);
    for (const sub of ["serve", "backend", "local"]) expect(r.out).toMatch(new RegExp(`^  ${sub} `, "m"));
    expect(r.out).toContain("kube-proxy flags accepted for compatibility");
    expect(r.out).toMatch(/--kube-api-qps float32 +no effect in kpng/);
  });

  test("-h on a subcommand: that command's flags", () => {
    const r = kpng("local", "-h");
    expect(r.code).toBe(0);
    expect(r.out).toContain("-o, --output string");
    expect(r.out).not.toContain("--conntrack-min");
  });

  test("--version prints package.json's version and exits 0; --version=raw as JSON", () => {
    expect(kpng("--version")).toMatchObject({ code: 0, out: `kpng v${pkg.version}\n` });
    const raw = kpng("--version=raw");
    expect(raw.code).toBe(0);
    // run from source: unstamped, and it says so (as an unstamped Go build of kube-proxy)
    expect(JSON.parse(raw.out)).toMatchObject({ gitVersion: `v${pkg.version}`, gitCommit: "unknown", compiler: "bun" });
  });
});
