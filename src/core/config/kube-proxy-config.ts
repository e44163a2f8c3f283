// kube-proxy's configuration file, KubeProxyConfiguration, in its two layouts:
// v1alpha1 (what clusters run today) and the restructured v1alpha2 of
// KEP-784 (platform sections, sync periods at the root, detectLocal.clusterCIDRs,
// nodeIPOverride, configHardFail; portRange and bindAddress dropped).
//
// The valibot schemas are strict (an unknown field is an issue) and carry the
// upstream defaults, so a parsed document is complete. A v1alpha1 document is
// defaulted *as v1alpha1* before conversion, like upstream does: an ipvs-mode
// file keeps its 0s minSyncPeriod instead of picking up v1alpha2's 1s.

import * as v from "valibot";
import { formatGoDuration, parseGoDuration } from "./duration.ts";
import { cidrFamily, ipFamily, isCIDR } from "../net/ip.ts";
import { acceptProblem, contentTypeProblem } from "../kube-http/content.ts";

export const GROUP = "kubeproxy.config.k8s.io";
export const V1ALPHA1 = `${GROUP}/v1alpha1`;
export const V1ALPHA2 = `${GROUP}/v1alpha2`;
export const KIND = "KubeProxyConfiguration";

const INT32_MAX = 2 ** 31 - 1;

// -- field helpers: every field may be absent or null (Go's zero value), which means its default

// Go fills defaults over zero values ("", 0, 0s) as well as over absent fields, for the
// fields whose zero means "unset" (zero = true below); kubeadm writes such zeros.
const str = (d = "", zero = false) =>
  v.nullish(
    v.pipe(
      v.string("must be a string"),
      v.transform((s) => (zero && s === "" ? d : s)),
    ),
    d,
  );
const bool = (d = false) => v.nullish(v.boolean("must be true or false"), d);
const int = (min: number, max: number, d: number, zero = false) =>
  v.nullish(
    v.pipe(
      v.number("must be a number"),
      v.integer("must be an integer"),
      v.minValue(min, `is out of range [${min}, ${max}]`),
      v.maxValue(max, `is out of range [${min}, ${max}]`),
      v.transform((n) => (zero && n === 0 ? d : n)),
    ),
    d,
  );
const dur = (d: string, zero = false) =>
  v.nullish(
    v.pipe(
      v.string('must be a duration string such as "30s"'),
      v.check((s) => parseGoDuration(s) !== null, 'is not a duration (e.g. "30s", "1m0s")'),
      v.check((s) => parseGoDuration(s)! >= 0, "must not be negative"),
      v.transform((s) => (zero && parseGoDuration(s) === 0 ? d : formatGoDuration(parseGoDuration(s)!))),
    ),
    d,
  );
const list = (item: v.GenericSchema<unknown, string>) => v.nullish(v.array(item, "must be a list"), (): string[] => []);
const obj = <E extends v.ObjectEntries>(entries: E) => {
  const schema = v.strictObject(entries, "must be a mapping");
  return v.nullish(schema, () => ({}) as v.InferInput<typeof schema>);
};
const pick = <const T extends readonly [string, ...string[]]>(options: T, d: T[number]) =>
  v.nullish(v.picklist(options, `must be one of: ${options.map((o) => (o === "" ? '""' : o)).join(", ")}`), d);

const ip = v.pipe(
  v.string("must be a string"),
  v.check((s) => ipFamily(s) !== null, "is not a valid IP address"),
);
const cidr = v.pipe(v.string("must be a string"), v.check(isCIDR, "is not a valid CIDR"));
const nodePortAddress = v.pipe(
  v.string("must be a string"),
  v.check((s) => s === "primary" || isCIDR(s), 'is not a valid CIDR or "primary"'),
);

/** `host:port` where host is an IP (IPv6 in brackets) and port 0-65535; "" turns the server off. */
export function isBindAddress(s: string): boolean {
  if (s === "") return true;
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(s);
  if (!m) return false;
  const host = m[1] ?? m[2];
  return (m[1] ? ipFamily(host) === "v6" : ipFamily(host) === "v4") && Number(m[3]) <= 65535;
}
/** As kube-proxy: "" is the default, a bare IP gets the default port. */
const bindAddress = (d: string) => {
  const port = d.slice(d.lastIndexOf(":") + 1);
  const withPort = (s: string) => (s === "" ? d : ipFamily(s) === "v4" ? `${s}:${port}` : ipFamily(s) === "v6" ? `[${s}]:${port}` : s);
  return v.nullish(
    v.pipe(v.string("must be a string"), v.transform(withPort), v.check(isBindAddress, 'must be "IP:port" (IPv6 in brackets)')),
    d,
  );
};

/** At most one value per IP family (a dual-stack pair). */
const onePerFamily = (family: (s: string) => string | null) => (xs: string[]) => {
  const fams = xs.map(family);
  return xs.length <= 2 && new Set(fams).size === fams.length;
};
const dualStackPair = (item: v.GenericSchema<unknown, string>, family: (s: string) => string | null) =>
  v.nullish(
    v.pipe(v.array(item, "must be a list"), v.check(onePerFamily(family), "must hold at most one value per IP family")),
    (): string[] => [],
  );

/** Cross-field rules the schemas cannot state: [field path, message] for each broken one. */
export function crossFieldIssues(doc: KubeProxyConfigV1alpha1 | KubeProxyConfig): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const order = (prefix: string, o: { syncPeriod: string; minSyncPeriod: string }) => {
    if (parseGoDuration(o.minSyncPeriod)! > parseGoDuration(o.syncPeriod)!)
      out.push([`${prefix}minSyncPeriod`, `"${o.minSyncPeriod}" must not be greater than ${prefix}syncPeriod ("${o.syncPeriod}")`]);
  };
  if (doc.apiVersion === V1ALPHA1) {
    order("iptables.", doc.iptables);
    order("ipvs.", doc.ipvs);
    order("nftables.", doc.nftables);
  } else order("", doc);
  return out;
}

const hostname = str("");
const clusterCIDRString = v.nullish(
  v.pipe(
    v.string("must be a string"),
    v.check((s) => s === "" || s.split(",").every((c) => isCIDR(c.trim())), "is not a comma-separated list of CIDRs"),
    v.check((s) => s === "" || onePerFamily(cidrFamily)(s.split(",").map((c) => c.trim())), "must hold at most one CIDR per IP family"),
  ),
  "",
);

const modes = ["", "iptables", "ipvs", "nftables", "kernelspace"] as const;
const detectLocalModes = ["", "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"] as const;
const schedulers = ["", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "sed", "nq", "dh", "mh"] as const;

// -- sections shared by both versions

const clientConnection = obj({
  kubeconfig: str(),
  // a type kpng cannot read is refused at start-up rather than met at the first answer
  acceptContentTypes: v.pipe(
    str(),
    v.check(
      (s) => acceptProblem(s) === null,
      (i) => acceptProblem(String(i.input)) ?? "",
    ),
  ),
  contentType: v.pipe(
    str("application/vnd.kubernetes.protobuf", true),
    v.check(
      (s) => contentTypeProblem(s) === null,
      (i) => contentTypeProblem(String(i.input)) ?? "",
    ),
  ),
  qps: v.nullish(
    v.pipe(
      v.number("must be a number"),
      v.minValue(0, "must not be negative"),
      v.transform((n) => n || 5),
    ),
    5,
  ),
  burst: int(0, INT32_MAX, 10, true),
});

const conntrack = obj({
  maxPerCore: int(0, INT32_MAX, 32768),
  min: int(0, INT32_MAX, 131072),
  tcpEstablishedTimeout: dur("24h0m0s"),
  tcpCloseWaitTimeout: dur("1h0m0s"),
  tcpBeLiberal: bool(),
  udpTimeout: dur("0s"),
  udpStreamTimeout: dur("0s"),
});

/** The ipvs fields both versions share (v1alpha2 moved only the sync periods and masqueradeBit). */
const ipvsCommon = {
  scheduler: pick(schedulers, ""),
  excludeCIDRs: list(cidr),
  strictARP: bool(),
  tcpTimeout: dur("0s"),
  tcpFinTimeout: dur("0s"),
  udpTimeout: dur("0s"),
};

const winkernel = obj({
  networkName: str(),
  sourceVip: v.nullish(v.union([v.literal(""), ip], "is not a valid IP address"), ""),
  enableDSR: bool(),
  rootHnsEndpointName: str(),
  forwardHealthCheckVip: bool(),
});

const common = {
  kind: v.literal(KIND, `must be ${KIND}`),
  featureGates: v.nullish(v.record(v.string(), v.boolean("must be true or false"), "must be a mapping"), () => ({})),
  clientConnection,
  // component-base's LoggingConfiguration: format and verbosity are acted on, the rest is kept as given.
  logging: v.nullish(
    v.looseObject(
      {
        format: v.optional(v.picklist(["", "text", "json"], 'must be "text" or "json"')),
        verbosity: v.optional(v.pipe(v.number("must be a number"), v.integer("must be an integer"), v.minValue(0, "must not be negative"))),
      },
      "must be a mapping",
    ),
    () => ({}),
  ),
  hostnameOverride: hostname,
  healthzBindAddress: bindAddress("0.0.0.0:10256"),
  metricsBindAddress: bindAddress("127.0.0.1:10249"),
  enableProfiling: bool(),
  showHiddenMetricsForVersion: str(),
  mode: pick(modes, ""),
  winkernel,
  detectLocalMode: pick(detectLocalModes, ""),
  nodePortAddresses: list(nodePortAddress),
  configSyncPeriod: dur("15m0s", true),
};

export const V1alpha1Schema = v.strictObject(
  {
    apiVersion: v.literal(V1ALPHA1),
    ...common,
    bindAddress: v.nullish(
      v.union(
        [
          v.pipe(
            v.literal(""),
            v.transform(() => "0.0.0.0"),
          ),
          ip,
        ],
        "is not a valid IP address",
      ),
      "0.0.0.0",
    ),
    bindAddressHardFail: bool(false),
    iptables: obj({
      masqueradeBit: int(0, 31, 14),
      masqueradeAll: bool(),
      localhostNodePorts: bool(true),
      snatNodeInternalIP: bool(),
      syncPeriod: dur("30s", true),
      minSyncPeriod: dur("1s", true),
    }),
    ipvs: obj({
      syncPeriod: dur("30s", true),
      minSyncPeriod: dur("0s"),
      ...ipvsCommon,
    }),
    nftables: obj({ masqueradeBit: int(0, 31, 14), masqueradeAll: bool(), syncPeriod: dur("30s", true), minSyncPeriod: dur("1s", true) }),
    detectLocal: obj({ bridgeInterface: str(), interfaceNamePrefix: str() }),
    clusterCIDR: clusterCIDRString,
    oomScoreAdj: int(-1000, 1000, -999),
    conntrack,
    portRange: str(),
    windowsRunAsService: bool(),
  },
  "must be a mapping",
);

export const V1alpha2Schema = v.strictObject(
  {
    apiVersion: v.literal(V1ALPHA2),
    ...common,
    nodeIPOverride: dualStackPair(ip, ipFamily),
    ipFamilyPolicy: pick(["", "SingleStack", "PreferDualStack", "RequireDualStack"], ""),
    configHardFail: bool(true),
    bindAddressHardFail: bool(true),
    linux: obj({ oomScoreAdj: int(-1000, 1000, -999), conntrack, masqueradeAll: bool() }),
    windows: obj({ runAsService: bool() }),
    iptables: obj({ masqueradeBit: int(0, 31, 14), localhostNodePorts: bool(false), snatNodeInternalIP: bool() }),
    ipvs: obj({
      masqueradeBit: int(0, 31, 14),
      ...ipvsCommon,
    }),
    nftables: obj({ masqueradeBit: int(0, 31, 14) }),
    detectLocal: obj({ bridgeInterface: str(), interfaceNamePrefix: str(), clusterCIDRs: dualStackPair(cidr, cidrFamily) }),
    syncPeriod: dur("30s", true),
    // Unlike v1alpha1's per-mode fields, an explicit 0s stays 0s: ipvs configurations carry one.
    minSyncPeriod: dur("1s"),
  },
  "must be a mapping",
);

export type KubeProxyConfigV1alpha1 = v.InferOutput<typeof V1alpha1Schema>;
/** The effective configuration, always in the newest layout. */
export type KubeProxyConfig = v.InferOutput<typeof V1alpha2Schema>;

export const defaultKubeProxyConfig = (): KubeProxyConfig => v.parse(V1alpha2Schema, { apiVersion: V1ALPHA2, kind: KIND });

const unspecified = (ip: string) => ip === "0.0.0.0" || ip === "::";

/** The fields v1alpha1 and v1alpha2 both hold, under one name and with one meaning: copied as they are either way. */
const SAME_IN_BOTH_VERSIONS = [
  "featureGates",
  "clientConnection",
  "logging",
  "hostnameOverride",
  "healthzBindAddress",
  "metricsBindAddress",
  "bindAddressHardFail",
  "enableProfiling",
  "showHiddenMetricsForVersion",
  "mode",
  "winkernel",
  "detectLocalMode",
  "nodePortAddresses",
  "configSyncPeriod",
] as const;

function sameInBothVersions<C extends KubeProxyConfig | KubeProxyConfigV1alpha1>(c: C): Pick<C, (typeof SAME_IN_BOTH_VERSIONS)[number]> {
  return Object.fromEntries(SAME_IN_BOTH_VERSIONS.map((k) => [k, c[k]])) as Pick<C, (typeof SAME_IN_BOTH_VERSIONS)[number]>;
}

/**
 * v1alpha1 (defaulted) -> v1alpha2 input, per KEP-784's tables. Fields that
 * were per backend but are generic take the value of the backend `mode`
 * selects (iptables when unset), as kube-proxy itself read them.
 */
export function convertV1alpha1(c: KubeProxyConfigV1alpha1): unknown {
  const active = c.mode === "ipvs" ? c.ipvs : c.mode === "nftables" ? c.nftables : c.iptables;
  const { syncPeriod: _s, minSyncPeriod: _m, ...ipvs } = c.ipvs;
  return {
    apiVersion: V1ALPHA2,
    kind: KIND,
    ...sameInBothVersions(c),
    // bindAddress only ever named the node's primary IP; "unspecified" meant "detect it".
    nodeIPOverride: unspecified(c.bindAddress) ? [] : [c.bindAddress],
    linux: {
      oomScoreAdj: c.oomScoreAdj,
      conntrack: c.conntrack,
      masqueradeAll: c.mode === "nftables" ? c.nftables.masqueradeAll : c.iptables.masqueradeAll,
    },
    windows: { runAsService: c.windowsRunAsService },
    iptables: {
      masqueradeBit: c.iptables.masqueradeBit,
      localhostNodePorts: c.iptables.localhostNodePorts,
      snatNodeInternalIP: c.iptables.snatNodeInternalIP,
    },
    // The ipvs proxier marked packets with iptables.masqueradeBit.
    ipvs: { ...ipvs, masqueradeBit: c.iptables.masqueradeBit },
    nftables: { masqueradeBit: c.nftables.masqueradeBit },
    detectLocal: {
      bridgeInterface: c.detectLocal.bridgeInterface,
      interfaceNamePrefix: c.detectLocal.interfaceNamePrefix,
      clusterCIDRs: c.clusterCIDR === "" ? [] : c.clusterCIDR.split(",").map((s) => s.trim()),
    },
    syncPeriod: active.syncPeriod,
    minSyncPeriod: active.minSyncPeriod,
  };
}

/** kube-proxy mode names <-> kpng backend names ("" = the default backend). */
export const backendOfMode = (mode: string): string => ({ nftables: "nft", kernelspace: "winkernel" })[mode] ?? mode;
export const modeOfBackend = (backend: string): KubeProxyConfig["mode"] =>
  (({ nft: "nftables", winkernel: "kernelspace", iptables: "iptables", ipvs: "ipvs" }) as const)[backend as "nft"] ?? "";

/**
 * kube-proxy's own defaults: a v1alpha1 document with nothing in it, defaulted
 * as v1alpha1 (what kube-proxy 1.36 starts from without --config), in the
 * v1alpha2 layout. Differs from defaultKubeProxyConfig() in
 * iptables.localhostNodePorts (true) and bindAddressHardFail (false).
 */
export const kubeProxyDefaults = (): KubeProxyConfig =>
  v.parse(V1alpha2Schema, convertV1alpha1(v.parse(V1alpha1Schema, { apiVersion: V1ALPHA1, kind: KIND })));

/**
 * The effective document (v1alpha2 layout) -> v1alpha1, which every kube-proxy
 * reads: per-mode sync periods and masqueradeAll get the one value, the node
 * IP override becomes bindAddress (its first IP: v1alpha1 holds one).
 */
export function toV1alpha1(c: KubeProxyConfig): KubeProxyConfigV1alpha1 {
  const sync = { syncPeriod: c.syncPeriod, minSyncPeriod: c.minSyncPeriod };
  const { masqueradeBit: _bit, ...ipvs } = c.ipvs;
  return {
    apiVersion: V1ALPHA1,
    kind: KIND,
    ...sameInBothVersions(c),
    bindAddress: c.nodeIPOverride[0] ?? "0.0.0.0",
    iptables: {
      masqueradeBit: c.iptables.masqueradeBit,
      masqueradeAll: c.linux.masqueradeAll,
      localhostNodePorts: c.iptables.localhostNodePorts,
      snatNodeInternalIP: c.iptables.snatNodeInternalIP,
      ...sync,
    },
    ipvs: { ...sync, ...ipvs },
    nftables: { masqueradeBit: c.nftables.masqueradeBit, masqueradeAll: c.linux.masqueradeAll, ...sync },
    detectLocal: { bridgeInterface: c.detectLocal.bridgeInterface, interfaceNamePrefix: c.detectLocal.interfaceNamePrefix },
    clusterCIDR: c.detectLocal.clusterCIDRs.join(","),
    oomScoreAdj: c.linux.oomScoreAdj,
    conntrack: c.linux.conntrack,
    portRange: "",
    windowsRunAsService: c.windows.runAsService,
  };
}

/** What a v1alpha2 document holds that v1alpha1 has no place for (toV1alpha1 drops it): `field (value)` each. */
export function v1alpha1Losses(c: KubeProxyConfig): string[] {
  const out: string[] = [];
  if (c.nodeIPOverride.length > 1) out.push(`nodeIPOverride[1] (${c.nodeIPOverride[1]})`);
  if (c.ipFamilyPolicy !== "") out.push(`ipFamilyPolicy (${c.ipFamilyPolicy})`);
  if (!c.configHardFail) out.push("configHardFail (false)");
  if (c.ipvs.masqueradeBit !== c.iptables.masqueradeBit)
    out.push(`ipvs.masqueradeBit (${c.ipvs.masqueradeBit}; v1alpha1's ipvs mode uses iptables.masqueradeBit, ${c.iptables.masqueradeBit})`);
  return out;
}
