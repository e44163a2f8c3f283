// kube-proxy configuration files: golden v1alpha1 -> v1alpha2 conversions,
// every validation error as one line naming the field, configHardFail, and
// the Config a document gives. `UPDATE_GOLDEN=1 bun test test/config`
// rewrites the golden outputs (review the diff).

import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { configFromKubeProxy, formatKubeProxyConfig, parseKubeProxyConfig } from "../../src/core/config/config-file.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { formatGoDuration, parseGoDuration } from "../../src/core/config/duration.ts";
import { V1ALPHA1 } from "../../src/core/config/kube-proxy-config.ts";
import { KpngError } from "../../src/core/errors.ts";

const golden = join(import.meta.dir, "golden");
const V1 = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
const V2 = "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n";

describe("Go durations", () => {
  const cases: Array<[string, number, string]> = [
    ["0", 0, "0s"],
    ["0s", 0, "0s"],
    ["30s", 30, "30s"],
    ["1m", 60, "1m0s"],
    ["1m30s", 90, "1m30s"],
    ["90s", 90, "1m30s"],
    ["2h22m", 8520, "2h22m0s"],
    ["24h", 86400, "24h0m0s"],
    ["500ms", 0.5, "500ms"],
    ["1.5s", 1.5, "1.5s"],
    ["1.5h", 5400, "1h30m0s"],
    ["250us", 0.00025, "250µs"],
    ["100ns", 1e-7, "100ns"],
  ];
  for (const [text, secs, printed] of cases) {
    test(`"${text}" is ${secs}s, printed "${printed}" as Go does`, () => {
      expect(parseGoDuration(text)).toBeCloseTo(secs, 9);
      expect(formatGoDuration(secs)).toBe(printed);
    });
  }
  for (const bad of ["", "30", "s", "1x", "1m 30s", "--1s", "1..5s"]) {
    test(`"${bad}" is not a duration`, () => expect(parseGoDuration(bad)).toBeNull());
  }
});

describe("golden conversions to v1alpha2", () => {
  const inputs = readdirSync(golden).filter((f) => /\.v1alpha[12]\.yaml$/.test(f));
  test("there are goldens", () => expect(inputs.length).toBeGreaterThanOrEqual(5));
  for (const f of inputs) {
    const out = join(golden, f.replace(/\.v1alpha[12]\.yaml$/, ".out.yaml"));
    test(`${f} -> ${f.replace(/\.v1alpha[12]\.yaml$/, ".out.yaml")}`, () => {
      const { doc, warnings } = parseKubeProxyConfig(f, readFileSync(join(golden, f), "utf8"));
      const text = formatKubeProxyConfig(doc);
      if (process.env.UPDATE_GOLDEN || !existsSync(out)) writeFileSync(out, text);
      expect(text).toBe(readFileSync(out, "utf8"));
      // Fields kpng does not act on are named, one line each (golden too).
      const warned = join(golden, f.replace(/\.v1alpha[12]\.yaml$/, ".warnings.txt"));
      const lines = warnings.map((w) => w.slice(f.length + 2)).join("\n");
      if (process.env.UPDATE_GOLDEN || !existsSync(warned)) writeFileSync(warned, lines);
      expect(lines).toBe(readFileSync(warned, "utf8"));
      // The written file is a fixed point: reading it back gives the same document.
      expect(formatKubeProxyConfig(parseKubeProxyConfig(out, text).doc)).toBe(text);
    });
  }

  // --write-config-to writes v1alpha1 by default: kube-proxy must read back what kpng wrote, to the same settings.
  for (const f of inputs.filter((x) => x.endsWith(".v1alpha1.yaml"))) {
    test(`${f}: written as v1alpha1 and read back, the same configuration`, () => {
      const { doc } = parseKubeProxyConfig(f, readFileSync(join(golden, f), "utf8"));
      const v1 = formatKubeProxyConfig(doc, V1ALPHA1);
      expect(v1).toStartWith(`apiVersion: ${V1ALPHA1}\n`);
      expect(formatKubeProxyConfig(parseKubeProxyConfig("back.yaml", v1).doc)).toBe(formatKubeProxyConfig(doc));
    });
  }

  const facts: Array<{ name: string; file: string; check: (d: ReturnType<typeof parseKubeProxyConfig>["doc"]) => void }> = [
    {
      name: "kubeadm's zeros and nulls become kube-proxy's defaults",
      file: "kubeadm.v1alpha1.yaml",
      check: (d) =>
        expect([
          d.syncPeriod,
          d.minSyncPeriod,
          d.configSyncPeriod,
          d.healthzBindAddress,
          d.metricsBindAddress,
          d.clientConnection.qps,
          d.iptables.masqueradeBit,
          d.linux.oomScoreAdj,
        ]).toEqual(["30s", "1s", "15m0s", "0.0.0.0:10256", "127.0.0.1:10249", 5, 14, -999]),
    },
    {
      name: "ipvs mode: sync periods from ipvs (0s kept), masquerade bit and masqueradeAll from iptables",
      file: "ipvs.v1alpha1.yaml",
      check: (d) =>
        expect([d.syncPeriod, d.minSyncPeriod, d.ipvs.masqueradeBit, d.linux.masqueradeAll, d.ipvs.scheduler]).toEqual([
          "1m0s",
          "0s",
          15,
          true,
          "wrr",
        ]),
    },
    {
      name: "nftables mode: bindAddress -> nodeIPOverride, clusterCIDR -> detectLocal.clusterCIDRs, bare healthz IP gets its port",
      file: "nftables.v1alpha1.yaml",
      check: (d) =>
        expect([d.nodeIPOverride, d.detectLocal.clusterCIDRs, d.healthzBindAddress, d.linux.masqueradeAll, d.minSyncPeriod]).toEqual([
          ["203.0.113.11"],
          ["198.19.0.0/16", "2001:db8:2::/56"],
          "0.0.0.0:10256",
          true,
          "2s",
        ]),
    },
    {
      name: "v1alpha1 keeps its defaults: localhostNodePorts true, bindAddressHardFail false",
      file: "minimal.v1alpha1.yaml",
      check: (d) => expect([d.iptables.localhostNodePorts, d.bindAddressHardFail, d.configHardFail]).toEqual([true, false, true]),
    },
    {
      name: "v1alpha2 defaults differ: localhostNodePorts false, bindAddressHardFail true",
      file: "restructured.v1alpha2.yaml",
      check: (d) =>
        expect([d.iptables.localhostNodePorts, d.bindAddressHardFail, d.minSyncPeriod, d.syncPeriod]).toEqual([
          false,
          true,
          "500ms",
          "1m30s",
        ]),
    },
  ];
  for (const c of facts) {
    test(c.name, () => c.check(parseKubeProxyConfig(c.file, readFileSync(join(golden, c.file), "utf8")).doc));
  }
});

/** One line, naming the file and the field. */
function errorOf(text: string): string {
  try {
    parseKubeProxyConfig("kp.yaml", text);
  } catch (err) {
    expect(err).toBeInstanceOf(KpngError);
    return (err as Error).message;
  }
  throw new Error("no error");
}

describe("every invalid field: one line naming it", () => {
  const cases: Array<{ name: string; text: string; error: string }> = [
    { name: "not YAML", text: "a: [1,", error: "kp.yaml: not valid YAML or JSON" },
    { name: "not a mapping", text: "- 1\n- 2\n", error: "kp.yaml: not a KubeProxyConfiguration mapping" },
    { name: "apiVersion missing", text: "kind: KubeProxyConfiguration\n", error: "kp.yaml: apiVersion: null is not supported" },
    {
      name: "apiVersion unknown",
      text: "apiVersion: kubeproxy.config.k8s.io/v1beta9\nkind: KubeProxyConfiguration\n",
      error: 'kp.yaml: apiVersion: "kubeproxy.config.k8s.io/v1beta9" is not supported',
    },
    {
      name: "kind wrong",
      text: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
      error: 'kp.yaml: kind: "KubeletConfiguration" must be KubeProxyConfiguration',
    },
    { name: "unknown field (v1alpha2: strict only)", text: V2 + "frobnicate: true\n", error: "kp.yaml: frobnicate: unknown field" },
    {
      name: "a content type kpng does not read",
      text: V2 + "clientConnection:\n  contentType: application/yaml\n",
      error:
        'kp.yaml: clientConnection.contentType: "application/yaml" kpng reads application/json and application/vnd.kubernetes.protobuf only',
    },
    {
      name: "an Accept list with a type kpng does not read",
      text: V1 + "clientConnection:\n  acceptContentTypes: application/cbor,application/json\n",
      error:
        'kp.yaml: clientConnection.acceptContentTypes: "application/cbor,application/json" "application/cbor": kpng reads application/json and application/vnd.kubernetes.protobuf only',
    },
    {
      name: "unknown nested field (v1alpha2: strict only)",
      text: V2 + "iptables:\n  masqueradeBitt: 3\n",
      error: "kp.yaml: iptables.masqueradeBitt: unknown field",
    },
    {
      name: "v1alpha1: an unknown field does not excuse an invalid one",
      text: V1 + "frobnicate: true\niptables:\n  masqueradeBit: 32\n",
      error: "kp.yaml: iptables.masqueradeBit: 32 is out of range [0, 31]",
    },
    { name: "a v1alpha1 field in v1alpha2", text: V2 + "clusterCIDR: 198.19.0.0/16\n", error: "kp.yaml: clusterCIDR: unknown field" },
    { name: "portRange is gone in v1alpha2", text: V2 + "portRange: 30000-32767\n", error: "kp.yaml: portRange: unknown field" },
    {
      name: "masqueradeBit too big",
      text: V1 + "iptables:\n  masqueradeBit: 32\n",
      error: "kp.yaml: iptables.masqueradeBit: 32 is out of range [0, 31]",
    },
    {
      name: "masqueradeBit negative",
      text: V2 + "nftables:\n  masqueradeBit: -1\n",
      error: "kp.yaml: nftables.masqueradeBit: -1 is out of range [0, 31]",
    },
    {
      name: "masqueradeBit a string",
      text: V2 + 'ipvs:\n  masqueradeBit: "14"\n',
      error: 'kp.yaml: ipvs.masqueradeBit: "14" must be a number',
    },
    {
      name: "oomScoreAdj out of range",
      text: V2 + "linux:\n  oomScoreAdj: 1001\n",
      error: "kp.yaml: linux.oomScoreAdj: 1001 is out of range [-1000, 1000]",
    },
    { name: "oomScoreAdj not an integer", text: V1 + "oomScoreAdj: 1.5\n", error: "kp.yaml: oomScoreAdj: 1.5 must be an integer" },
    {
      name: "syncPeriod not a duration",
      text: V2 + "syncPeriod: 30\n",
      error: 'kp.yaml: syncPeriod: 30 must be a duration string such as "30s"',
    },
    { name: "syncPeriod without unit", text: V2 + 'syncPeriod: "30"\n', error: 'kp.yaml: syncPeriod: "30" is not a duration' },
    {
      name: "negative duration",
      text: V1 + "iptables:\n  minSyncPeriod: -1s\n",
      error: 'kp.yaml: iptables.minSyncPeriod: "-1s" must not be negative',
    },
    {
      name: "minSyncPeriod above syncPeriod (v1alpha2)",
      text: V2 + "syncPeriod: 10s\nminSyncPeriod: 1m\n",
      error: 'kp.yaml: minSyncPeriod: "1m0s" must not be greater than syncPeriod ("10s")',
    },
    {
      name: "minSyncPeriod above syncPeriod (v1alpha1 ipvs)",
      text: V1 + "ipvs:\n  syncPeriod: 5s\n  minSyncPeriod: 6s\n",
      error: "kp.yaml: ipvs.minSyncPeriod: ",
    },
    {
      name: "conntrack timeout not a duration",
      text: V2 + "linux:\n  conntrack:\n    tcpCloseWaitTimeout: soon\n",
      error: 'kp.yaml: linux.conntrack.tcpCloseWaitTimeout: "soon" is not a duration',
    },
    {
      name: "conntrack maxPerCore negative",
      text: V1 + "conntrack:\n  maxPerCore: -1\n",
      error: "kp.yaml: conntrack.maxPerCore: -1 is out of range",
    },
    { name: "scheduler unknown", text: V1 + "ipvs:\n  scheduler: fastest\n", error: 'kp.yaml: ipvs.scheduler: "fastest" must be one of' },
    {
      name: "excludeCIDRs entry",
      text: V2 + "ipvs:\n  excludeCIDRs: [203.0.113.0/24, nope]\n",
      error: 'kp.yaml: ipvs.excludeCIDRs[1]: "nope" is not a valid CIDR',
    },
    {
      name: "clusterCIDR not a CIDR",
      text: V1 + "clusterCIDR: 198.19.0.0\n",
      error: 'kp.yaml: clusterCIDR: "198.19.0.0" is not a comma-separated list of CIDRs',
    },
    { name: "clusterCIDR two of one family", text: V1 + "clusterCIDR: 198.19.0.0/16,198.18.0.0/16\n", error: "kp.yaml: clusterCIDR: " },
    {
      name: "detectLocal.clusterCIDRs entry",
      text: V2 + "detectLocal:\n  clusterCIDRs: [198.19.0.0/33]\n",
      error: 'kp.yaml: detectLocal.clusterCIDRs[0]: "198.19.0.0/33" is not a valid CIDR',
    },
    {
      name: "detectLocal.clusterCIDRs three",
      text: V2 + "detectLocal:\n  clusterCIDRs: [198.19.0.0/16, 2001:db8:2::/56, 198.18.0.0/16]\n",
      error: "kp.yaml: detectLocal.clusterCIDRs: ",
    },
    {
      name: "nodePortAddresses entry",
      text: V1 + "nodePortAddresses: [all-of-them]\n",
      error: 'kp.yaml: nodePortAddresses[0]: "all-of-them" is not a valid CIDR or "primary"',
    },
    {
      name: "nodeIPOverride entry",
      text: V2 + "nodeIPOverride: [203.0.113]\n",
      error: 'kp.yaml: nodeIPOverride[0]: "203.0.113" is not a valid IP address',
    },
    {
      name: "bindAddress not an IP",
      text: V1 + "bindAddress: my-node\n",
      error: 'kp.yaml: bindAddress: "my-node" is not a valid IP address',
    },
    {
      name: "healthzBindAddress with a name",
      text: V1 + "healthzBindAddress: localhost:10256\n",
      error: 'kp.yaml: healthzBindAddress: "localhost:10256" must be "IP:port"',
    },
    {
      name: "metricsBindAddress port too big",
      text: V2 + "metricsBindAddress: 127.0.0.1:99999\n",
      error: 'kp.yaml: metricsBindAddress: "127.0.0.1:99999" must be "IP:port"',
    },
    {
      name: "mode unknown",
      text: V1 + "mode: userspace\n",
      error: 'kp.yaml: mode: "userspace" must be one of: "", iptables, ipvs, nftables, kernelspace',
    },
    { name: "detectLocalMode unknown", text: V2 + "detectLocalMode: Magic\n", error: 'kp.yaml: detectLocalMode: "Magic" must be one of' },
    {
      name: "ipFamilyPolicy unknown",
      text: V2 + "ipFamilyPolicy: Dual\n",
      error: 'kp.yaml: ipFamilyPolicy: "Dual" must be one of: "", SingleStack, PreferDualStack, RequireDualStack',
    },
    {
      name: "configHardFail not a boolean",
      text: V2 + 'configHardFail: "no"\n',
      error: 'kp.yaml: configHardFail: "no" must be true or false',
    },
    {
      name: "featureGates value",
      text: V1 + 'featureGates:\n  SomeGate: "true"\n',
      error: 'kp.yaml: featureGates.SomeGate: "true" must be true or false',
    },
    { name: "qps negative", text: V1 + "clientConnection:\n  qps: -1\n", error: "kp.yaml: clientConnection.qps: -1 must not be negative" },
    {
      name: "burst fractional",
      text: V2 + "clientConnection:\n  burst: 1.5\n",
      error: "kp.yaml: clientConnection.burst: 1.5 must be an integer",
    },
    {
      name: "winkernel.sourceVip",
      text: V1 + "winkernel:\n  sourceVip: vip\n",
      error: 'kp.yaml: winkernel.sourceVip: "vip" is not a valid IP address',
    },
    { name: "a section that is not a mapping", text: V2 + "linux: true\n", error: "kp.yaml: linux: true must be a mapping" },
    {
      name: "a list that is not a list",
      text: V2 + "nodePortAddresses: primary\n",
      error: 'kp.yaml: nodePortAddresses: "primary" must be a list',
    },
    { name: "hostnameOverride not a string", text: V1 + "hostnameOverride: 5\n", error: "kp.yaml: hostnameOverride: 5 must be a string" },
    {
      name: "enableProfiling not a boolean",
      text: V1 + "enableProfiling: yes-please\n",
      error: 'kp.yaml: enableProfiling: "yes-please" must be true or false',
    },
    { name: "several problems: the first, and how many more", text: V2 + "syncPeriod: x\nmode: y\nfoo: 1\n", error: "(and 2 more)" },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const msg = errorOf(c.text);
      expect(msg).toStartWith("[invalid_argument] kp.yaml: ");
      expect(msg).toContain(c.error);
      expect(msg.split("\n")).toHaveLength(1);
    });
  }
});

describe("configHardFail: false", () => {
  test("unknown and invalid fields are warnings; their defaults apply, the rest loads", () => {
    const { doc, warnings } = parseKubeProxyConfig(
      "kp.yaml",
      V2 + "configHardFail: false\nfrobnicate: 1\nsyncPeriod: soon\nnftables:\n  masqueradeBit: 40\nminSyncPeriod: 3s\nmode: nftables\n",
    );
    expect(warnings.toSorted()).toEqual([
      "kp.yaml: frobnicate: unknown field (ignored: configHardFail is false)",
      "kp.yaml: nftables.masqueradeBit: 40 is out of range [0, 31] (ignored: configHardFail is false)",
      'kp.yaml: syncPeriod: "soon" is not a duration (e.g. "30s", "1m0s") (ignored: configHardFail is false)',
    ]);
    expect([doc.syncPeriod, doc.nftables.masqueradeBit, doc.minSyncPeriod, doc.mode, doc.configHardFail]).toEqual([
      "30s",
      14,
      "3s",
      "nftables",
      false,
    ]);
  });

  test("a cross-field problem drops the dependent field", () => {
    const { doc, warnings } = parseKubeProxyConfig("kp.yaml", V2 + "configHardFail: false\nsyncPeriod: 10s\nminSyncPeriod: 1m\n");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("minSyncPeriod");
    expect([doc.syncPeriod, doc.minSyncPeriod]).toEqual(["10s", "1s"]);
  });

  test("v1alpha1 has no such switch: an unknown field, decoded leniently", () => {
    expect(parseKubeProxyConfig("kp.yaml", V1 + "mode: nftables\nconfigHardFail: false\n").warnings).toEqual([
      'kp.yaml: using lenient decoding as strict decoding failed: unknown field "configHardFail"',
    ]);
  });

  test("settings kpng does not act on are warnings even when valid", () => {
    const { warnings } = parseKubeProxyConfig("kp.yaml", V2 + "enableProfiling: true\n");
    expect(warnings).toEqual(["kp.yaml: enableProfiling: true has no effect in kpng: no /debug/pprof (a Go runtime feature)"]);
  });
});

describe("v1alpha1: strict decoding, then lenient with a warning (as kube-proxy)", () => {
  const cases: Array<{ name: string; text: string; warning: RegExp; check: (d: ReturnType<typeof parseKubeProxyConfig>["doc"]) => void }> =
    [
      {
        name: "unknown top-level field: dropped, the rest applies",
        text: V1 + "frobnicate: true\nmode: nftables\n",
        warning: /unknown field "frobnicate"$/,
        check: (d) => expect(d.mode).toBe("nftables"),
      },
      {
        name: "unknown nested fields: all named in one line",
        text: V1 + "mode: nftables\niptables:\n  masqueradeBitt: 3\n  masqueradeBit: 5\nconntrack:\n  maxx: 1\n",
        warning:
          /unknown field "iptables\.masqueradeBitt", unknown field "conntrack\.maxx"$|unknown field "conntrack\.maxx", unknown field "iptables\.masqueradeBitt"$/,
        check: (d) => expect(d.iptables.masqueradeBit).toBe(5),
      },
      {
        name: "a field given twice: the last value",
        text: V1 + "mode: ipvs\nmode: nftables\n",
        warning: /strict decoding failed: .*(duplicate|unique).*\(the last value is used\)$/i,
        check: (d) => expect(d.mode).toBe("nftables"),
      },
    ];
  for (const c of cases) {
    test(c.name, () => {
      const { doc, warnings } = parseKubeProxyConfig("kp.yaml", c.text);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toStartWith("kp.yaml: using lenient decoding as strict decoding failed: ");
      expect(warnings[0]).toMatch(c.warning);
      c.check(doc);
    });
  }
  test("v1alpha2: a field given twice is an error", () => {
    expect(errorOf(V2 + "mode: ipvs\nmode: nftables\n")).toContain("kp.yaml: not valid YAML or JSON");
  });
});

describe("fields kpng does not act on: one warning each, none for kube-proxy's defaults", () => {
  const warningsOf = (text: string) => parseKubeProxyConfig("kp.yaml", text).warnings.map((w) => w.replace("kp.yaml: ", ""));
  const cases: Array<{ name: string; text: string; want: string[] }> = [
    {
      name: "kubeadm-style zeros in nftables mode: nothing to say",
      text: V1 + 'mode: nftables\nclientConnection:\n  qps: 0\n  burst: 0\n  contentType: ""\nconfigSyncPeriod: 0s\n',
      want: [],
    },
    {
      name: "client rate limits (the content types are honoured: nothing to say)",
      text: V2 + "clientConnection:\n  qps: 50\n  burst: 100\n  contentType: application/json\n  acceptContentTypes: application/json\n",
      want: [
        "clientConnection.qps: 50 has no effect in kpng: kpng's client has no client-side rate limit",
        "clientConnection.burst: 100 has no effect in kpng: kpng's client has no client-side rate limit",
      ],
    },
    {
      name: "feature gates, profiling",
      text: V2 + "featureGates:\n  Foo: true\nenableProfiling: true\n",
      want: [
        'featureGates: {"Foo":true} has no effect in kpng: kpng has no feature gates',
        "enableProfiling: true has no effect in kpng: no /debug/pprof (a Go runtime feature)",
      ],
    },
    { name: "localhost node ports: only iptables mode has them", text: V1 + "mode: nftables\n", want: [] },
    {
      name: "v1alpha1 portRange (unused since the userspace mode)",
      text: V1 + "mode: nftables\nportRange: 30000-32767\n",
      want: ["portRange: 30000-32767 has no effect in kpng: unused, as in kube-proxy since its userspace mode was removed"],
    },
    {
      name: "ipvs fields outside ipvs mode: nothing",
      text: V1 + "mode: iptables\niptables:\n  localhostNodePorts: false\nipvs:\n  strictARP: true\n",
      want: [],
    },
    {
      name: "logging format and verbosity are applied; split streams are not",
      text: V2 + "logging:\n  format: json\n  verbosity: 3\n  options:\n    json:\n      splitStream: true\n",
      want: ['logging.options: {"json":{"splitStream":true}} has no effect in kpng: every line goes to stderr, unbuffered'],
    },
  ];
  for (const c of cases) test(c.name, () => expect(warningsOf(c.text)).toEqual(c.want));
});

describe("the Config a document gives", () => {
  const cfgOf = (text: string) =>
    configFromKubeProxy(parseKubeProxyConfig("kp.yaml", text).doc, defaultConfig({ nodeName: "from-base", dryRun: true }));
  const cases: Array<{ name: string; text: string; want: Record<string, unknown> }> = [
    {
      name: "nftables mode -> nft backend, nftables.masqueradeBit",
      text: V2 + "mode: nftables\nnftables:\n  masqueradeBit: 9\niptables:\n  masqueradeBit: 3\n",
      want: { mode: "nft", masqueradeBit: 9 },
    },
    {
      name: "iptables mode -> iptables.masqueradeBit",
      text: V2 + "mode: iptables\niptables:\n  masqueradeBit: 3\n",
      want: { mode: "iptables", masqueradeBit: 3 },
    },
    {
      name: "ipvs mode -> ipvs.masqueradeBit, scheduler",
      text: V1 + "mode: ipvs\niptables:\n  masqueradeBit: 4\nipvs:\n  scheduler: lc\n",
      want: { mode: "ipvs", masqueradeBit: 4, ipvs: { scheduler: "lc", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0 } },
    },
    {
      name: "kernelspace -> winkernel",
      text: V2 + "mode: kernelspace\nwinkernel:\n  networkName: l2bridge\n",
      want: { mode: "winkernel", winkernel: { sourceVip: "", networkName: "l2bridge", enableDSR: false } },
    },
    { name: "no mode -> the default backend", text: V2, want: { mode: "" } },
    {
      name: "node name, IPs, CIDRs, node-port addresses",
      text: V1 + "hostnameOverride: Node-7\nbindAddress: 203.0.113.17\nclusterCIDR: 198.19.0.0/16\nnodePortAddresses: [primary]\n",
      want: { nodeName: "node-7", nodeIPs: ["203.0.113.17"], clusterCIDRs: ["198.19.0.0/16"], nodePortAddresses: ["primary"] },
    },
    {
      name: "sync periods in seconds",
      text: V2 + "syncPeriod: 1m\nminSyncPeriod: 250ms\n",
      want: { syncPeriodSeconds: 60, minSyncPeriodSeconds: 0.25 },
    },
    {
      name: "conntrack UDP timeout, masqueradeAll, servers, kubeconfig",
      text:
        V2 +
        "linux:\n  masqueradeAll: true\n  conntrack:\n    udpTimeout: 45s\nhealthzBindAddress: 127.0.0.1:1\nmetricsBindAddress: 127.0.0.1:2\nclientConnection:\n  kubeconfig: /k\n",
      want: {
        masqueradeAll: true,
        conntrack: { udpTimeoutSeconds: 45 },
        healthzBindAddress: "127.0.0.1:1",
        metricsBindAddress: "127.0.0.1:2",
        kubeconfig: "/k",
      },
    },
    { name: "kpng-only fields of the base are kept", text: V2, want: { nodeName: "from-base", dryRun: true } },
    {
      name: "logging format and verbosity",
      text: V2 + "logging:\n  format: json\n  verbosity: 4\n",
      want: { logging: { format: "json", verbosity: 4 } },
    },
    {
      name: "ipvs fields and localhostNodePorts pass through to the backends",
      text:
        V1 +
        "mode: ipvs\nipvs:\n  strictARP: true\n  excludeCIDRs: [203.0.113.0/24]\n  tcpTimeout: 15m\niptables:\n  localhostNodePorts: false\n",
      want: {
        ipvs: { strictARP: true, excludeCIDRs: ["203.0.113.0/24"], tcpTimeoutSeconds: 900 },
        iptables: { localhostNodePorts: false },
      },
    },
  ];
  for (const c of cases) test(c.name, () => expect(cfgOf(c.text)).toMatchObject(c.want));
});

describe("minSyncPeriod set by the operator (else kpng paces syncs by their cost)", () => {
  const cases: Array<{ name: string; text: string; set: boolean }> = [
    { name: "v1alpha1 without one", text: V1, set: false },
    {
      name: "v1alpha1 iptables 0s (kubeadm writes it; kube-proxy reads its default)",
      text: `${V1}iptables:\n  minSyncPeriod: 0s\n`,
      set: false,
    },
    { name: "v1alpha1 iptables 1s (mode empty: iptables)", text: `${V1}iptables:\n  minSyncPeriod: 1s\n`, set: true },
    { name: "v1alpha1 nftables mode reads its own section", text: `${V1}mode: nftables\niptables:\n  minSyncPeriod: 2s\n`, set: false },
    { name: "v1alpha1 nftables 500ms", text: `${V1}mode: nftables\nnftables:\n  minSyncPeriod: 500ms\n`, set: true },
    { name: "v1alpha1 ipvs 3s", text: `${V1}mode: ipvs\nipvs:\n  minSyncPeriod: 3s\n`, set: true },
    { name: "v1alpha2 root 1s", text: `${V2}minSyncPeriod: 1s\n`, set: true },
    { name: "v1alpha2 without one", text: V2, set: false },
  ];
  for (const c of cases) test(c.name, () => expect(parseKubeProxyConfig("kp.yaml", c.text).minSyncPeriodSet).toBe(c.set));
});
