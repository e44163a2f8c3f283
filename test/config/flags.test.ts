// kube-proxy's flags -> kpng's Config and the configuration document, as
// kube-proxy binds them (a table): sync periods per mode, the deprecated
// port flags, conntrack, logging, and fields passed through to backends.

import { describe, expect, test } from "bun:test";
import { parseArgv } from "../../src/core/config/argv.ts";
import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import {
  backendNames,
  checkBackendPlatform,
  configFromCLIDefaults,
  configFromFlags,
  defaultBackend,
  listenArgs,
  modeSource,
  proxyArgs,
  sourceArgs,
} from "../../src/core/config/flags.ts";
import { kubeProxyArgs, logArgs } from "../../src/core/config/kube-proxy-flags.ts";

const defs = { ...sourceArgs, ...proxyArgs, ...listenArgs, ...kubeProxyArgs, ...logArgs };
const cfgOf = (argv: string[]): Config => {
  const p = parseArgv(argv, defs);
  return configFromFlags(p.args, p.rawArgs, { ...configFromCLIDefaults(), nodeName: "n" });
};

describe("kube-proxy flags into the Config", () => {
  const cases: Array<{ name: string; argv: string[]; check: (c: Config) => unknown; want: unknown }> = [
    {
      name: "--healthz-bind-address with an IP only: the default port",
      argv: ["--healthz-bind-address=127.0.0.1"],
      check: (c) => c.healthzBindAddress,
      want: "127.0.0.1:10256",
    },
    {
      name: "an IPv6 address only: brackets and the port",
      argv: ["--metrics-bind-address=::1"],
      check: (c) => c.metricsBindAddress,
      want: "[::1]:10249",
    },
    {
      name: "--healthz-port gives an IP-only address its port",
      argv: ["--healthz-bind-address=127.0.0.1", "--healthz-port=9999"],
      check: (c) => c.healthzBindAddress,
      want: "127.0.0.1:9999",
    },
    {
      name: "--healthz-port alone leaves an address that has a port (AppendPortIfNeeded)",
      argv: ["--healthz-port=9999"],
      check: (c) => c.healthzBindAddress,
      want: "0.0.0.0:10256",
    },
    { name: "--metrics-port=0 turns the metrics server off", argv: ["--metrics-port=0"], check: (c) => c.metricsBindAddress, want: "" },
    {
      name: "--iptables-sync-period outside ipvs mode",
      argv: ["--iptables-sync-period=10s", "--iptables-min-sync-period=2s"],
      check: (c) => [c.syncPeriodSeconds, c.minSyncPeriodSeconds],
      want: [10, 2],
    },
    {
      name: "--iptables-sync-period is ignored in ipvs mode, --ipvs-sync-period applies",
      argv: ["--proxy-mode=ipvs", "--iptables-sync-period=10s", "--ipvs-sync-period=20s", "--ipvs-min-sync-period=0s"],
      check: (c) => [c.syncPeriodSeconds, c.minSyncPeriodSeconds, c.ipvs.syncPeriodSeconds],
      want: [20, 0, 20],
    },
    {
      name: "conntrack flags into linux.conntrack",
      argv: ["--conntrack-max-per-core=0", "--conntrack-min=1", "--conntrack-tcp-be-liberal", "--conntrack-udp-timeout=45s"],
      check: (c) => [
        c.kubeProxy.linux.conntrack.maxPerCore,
        c.kubeProxy.linux.conntrack.min,
        c.kubeProxy.linux.conntrack.tcpBeLiberal,
        c.conntrack.udpTimeoutSeconds,
      ],
      want: [0, 1, true, 45],
    },
    {
      name: "-v and --logging-format",
      argv: ["-v", "3", "--logging-format=json"],
      check: (c) => c.logging,
      want: { format: "json", verbosity: 3 },
    },
    { name: "--oom-score-adj", argv: ["--oom-score-adj=-500"], check: (c) => c.kubeProxy.linux.oomScoreAdj, want: -500 },
    {
      name: "--feature-gates, as a map",
      argv: ["--feature-gates=A=true, B=false"],
      check: (c) => c.kubeProxy.featureGates,
      want: { A: true, B: false },
    },
    {
      name: "ipvs fields pass through to the backend",
      argv: ["--ipvs-strict-arp", "--ipvs-exclude-cidrs=10.0.0.0/8,fd00::/8", "--ipvs-tcp-timeout=15m"],
      check: (c) => [c.ipvs.strictARP, c.ipvs.excludeCIDRs, c.ipvs.tcpTimeoutSeconds],
      want: [true, ["10.0.0.0/8", "fd00::/8"], 900],
    },
    {
      name: "--iptables-localhost-nodeports=false passes through",
      argv: ["--iptables-localhost-nodeports=false"],
      check: (c) => c.iptables?.localhostNodePorts,
      want: false,
    },
    { name: "without it, kube-proxy's v1alpha1 default (true)", argv: [], check: (c) => c.iptables?.localhostNodePorts, want: true },
    { name: "--bind-address-hard-fail", argv: ["--bind-address-hard-fail"], check: (c) => c.kubeProxy.bindAddressHardFail, want: true },
    {
      name: "--hostname-override is trimmed and lower-cased",
      argv: ["--hostname-override= Node-7 "],
      check: (c) => [c.nodeName, c.kubeProxy.hostnameOverride],
      want: ["node-7", "Node-7"],
    },
    {
      name: "without a file or a period flag, the sync periods stay kpng's defaults",
      argv: ["--conntrack-min=1"],
      check: (c) => [c.syncPeriodSeconds, c.minSyncPeriodSeconds],
      want: [defaultConfig().syncPeriodSeconds, defaultConfig().minSyncPeriodSeconds],
    },
    {
      name: "--proxy-mode sets the mode and the document's mode name",
      argv: ["--proxy-mode=nftables"],
      check: (c) => [c.mode, c.kubeProxy.mode],
      want: ["nft", "nftables"],
    },
  ];
  for (const c of cases) test(c.name, () => expect(c.check(cfgOf(c.argv))).toEqual(c.want));
});

describe("bad values: one line naming the flag", () => {
  const cases: Array<{ name: string; argv: string[]; error: RegExp }> = [
    { name: "-v not a number", argv: ["-v", "two"], error: /flag --v: "two" must be an integer/ },
    {
      name: "--conntrack-max-per-core negative",
      argv: ["--conntrack-max-per-core=-1"],
      error: /flag --conntrack-max-per-core: "-1" must be an integer in \[0, 2147483647\]/,
    },
    {
      name: "--conntrack-tcp-timeout-established not a duration",
      argv: ["--conntrack-tcp-timeout-established=1day"],
      error: /flag --conntrack-tcp-timeout-established: "1day" is not a duration/,
    },
    {
      name: "--feature-gates malformed",
      argv: ["--feature-gates=Foo"],
      error: /flag --feature-gates: "Foo" must be NAME=true or NAME=false/,
    },
    {
      name: "--oom-score-adj out of range",
      argv: ["--oom-score-adj=2000"],
      error: /flag --oom-score-adj: "2000" must be an integer in \[-1000, 1000\]/,
    },
    {
      name: "--detect-local-mode unknown",
      argv: ["--detect-local-mode=Magic"],
      error: /flag --detect-local-mode: "Magic" must be one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix/,
    },
    {
      name: "--ipvs-exclude-cidrs not a CIDR",
      argv: ["--ipvs-exclude-cidrs=10.0.0.0/8,nope"],
      error: /flag --ipvs-exclude-cidrs: "nope" is not a valid CIDR/,
    },
    { name: "--healthz-port not a port", argv: ["--healthz-port=70000"], error: /flag --healthz-port: "70000" must be a port number/ },
    {
      name: "--kube-api-qps not a number",
      argv: ["--kube-api-qps=fast"],
      error: /flag --kube-api-qps: "fast" must be a non-negative number/,
    },
    { name: "--hostname-override of blanks", argv: ["--hostname-override= "], error: /flag --hostname-override: " " is empty/ },
  ];
  for (const c of cases) test(c.name, () => expect(() => cfgOf(c.argv)).toThrow(c.error));
});

describe("the mode when none is asked for: kube-proxy 1.36's platformApplyDefaults", () => {
  const cases: Array<{ name: string; argv: string[]; mode?: string; want: string[]; from: string }> = [
    { name: "nothing given: iptables (Linux)", argv: [], want: ["iptables"], from: "default" },
    { name: "the file's mode", argv: [], mode: "nft", want: ["nft"], from: "config" },
    { name: "--proxy-mode over the file", argv: ["--proxy-mode=ipvs"], mode: "nft", want: ["ipvs"], from: "flag" },
    { name: "a plugin alone: no built-in backend", argv: ["--plugin=./b.ts"], want: [], from: "flag" },
    // pflag keeps a repeated flag's last value: an override appended to a DaemonSet's args wins
    {
      name: "--proxy-mode twice: the last one wins",
      argv: ["--proxy-mode=iptables", "--proxy-mode", "nftables"],
      want: ["nft"],
      from: "flag",
    },
    { name: "--backend twice: kpng runs both", argv: ["--backend=nft", "--backend=iptables"], want: ["nft", "iptables"], from: "flag" },
    {
      name: "--backend and --proxy-mode: the backends, then the last mode",
      argv: ["--backend=userspace", "--proxy-mode=ipvs", "--proxy-mode=nftables"],
      want: ["userspace", "nft"],
      from: "flag",
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const p = parseArgv(c.argv, defs);
      const cfg = { ...defaultConfig(), mode: c.mode ?? "" };
      expect<unknown[]>([backendNames(p.rawArgs, cfg), modeSource(p.rawArgs, cfg)]).toEqual([c.want, c.from]);
    });
  }
  test("on Windows: kernelspace (winkernel)", () =>
    expect([defaultBackend("linux"), defaultBackend("win32")]).toEqual(["iptables", "winkernel"]));
  test("kernelspace on Linux: refused unless --dry-run (it would program nothing); on Windows it runs", () => {
    expect(() => checkBackendPlatform(["winkernel"], false, "linux")).toThrow(/mode kernelspace .* this node runs linux/);
    expect(() => checkBackendPlatform(["winkernel"], true, "linux")).not.toThrow();
    expect(() => checkBackendPlatform(["winkernel"], false, "win32")).not.toThrow();
    expect(() => checkBackendPlatform(["nft"], false, "linux")).not.toThrow();
  });
});
