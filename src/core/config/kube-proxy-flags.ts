// kube-proxy 1.36's flags that kpng's own flag set (flags.ts) does not already
// define under the same name (cmd/kube-proxy/app/options.go and
// component-base's logging flags), each bound to its field of the
// KubeProxyConfiguration, as kube-proxy binds them. A flag with `noEffect` is
// accepted, recorded in the configuration (so `--write-config-to` keeps it)
// and named in one WARN line at start-up.

import { invalid } from "../errors.ts";
import { isCIDR } from "../net/ip.ts";
import type { FlagDef, FlagDefs } from "./argv.ts";
import { formatGoDuration, parseGoDuration } from "./duration.ts";
import type { KubeProxyConfig } from "./kube-proxy-config.ts";
import { contentTypeProblem } from "../kube-http/content.ts";

const INT32_MAX = 2 ** 31 - 1;

/** Parses a flag's text into the field's value, or throws the flag's one-line error. */
type Parse = (flag: string, s: string) => unknown;

const int =
  (min: number, max: number): Parse =>
  (flag, s) => {
    const n = Number(s);
    if (!/^-?\d+$/.test(s) || n < min || n > max) throw invalid(`flag --${flag}: "${s}" must be an integer in [${min}, ${max}]`);
    return n;
  };
const float: Parse = (flag, s) => {
  if (!/^\d+(\.\d+)?$/.test(s)) throw invalid(`flag --${flag}: "${s}" must be a non-negative number`);
  return Number(s);
};
const duration: Parse = (flag, s) => {
  const n = parseGoDuration(s);
  if (n === null || n < 0) throw invalid(`flag --${flag}: "${s}" is not a duration (e.g. 1s, 500ms, 2m)`);
  return formatGoDuration(n);
};
const bool: Parse = (_flag, s) => s === "true";
const text: Parse = (_flag, s) => s;
const contentType: Parse = (flag, s) => {
  const problem = contentTypeProblem(s);
  if (problem) throw invalid(`flag --${flag}: "${s}": ${problem}`);
  return s;
};
const cidrs: Parse = (flag, s) => {
  const xs = s
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);
  for (const c of xs) if (!isCIDR(c)) throw invalid(`flag --${flag}: "${c}" is not a valid CIDR`);
  return xs;
};
const oneOf =
  (values: readonly string[]): Parse =>
  (flag, s) => {
    if (!values.includes(s)) throw invalid(`flag --${flag}: "${s}" must be one of ${values.join(", ")}`);
    return s;
  };
/** cliflag.MapStringBool: `A=true,B=false`. */
const mapStringBool: Parse = (flag, s) => {
  const out: Record<string, boolean> = {};
  for (const kv of s
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean)) {
    const m = /^([^=]+)=(.*)$/.exec(kv);
    const b = m?.[2].toLowerCase();
    if (!m || (b !== "true" && b !== "false")) throw invalid(`flag --${flag}: "${kv}" must be NAME=true or NAME=false`);
    out[m[1].trim()] = b === "true";
  }
  return out;
};

/**
 * A kube-proxy flag: its --help entry and, when it sets a field of the
 * KubeProxyConfiguration as kube-proxy binds it, that field (v1alpha2 layout)
 * and how its text is read. The sync periods depend on the mode: see
 * applyKubeProxyFlags.
 */
interface KubeProxyFlag extends FlagDef {
  field?: string;
  parse?: Parse;
}

export const logArgs = {
  v: {
    type: "string",
    alias: ["v"],
    valueHint: "int",
    description: "log verbosity: debug lines at higher levels (klog's -v; 2 is common, 4 is debug)",
    field: "logging.verbosity",
    parse: int(0, INT32_MAX),
  },
  "logging-format": {
    type: "string",
    valueHint: "string",
    description: 'log format: "text" (default) or "json" (one object per line: ts, v, msg, key/values)',
    field: "logging.format",
    parse: oneOf(["text", "json"]),
  },
  "log-flush-frequency": { type: "string", noEffect: "every line is written at once", field: "logging.flushFrequency", parse: duration },
  vmodule: { type: "string", noEffect: "kpng has no per-file verbosity", field: "logging.vmodule", parse: text },
  "log-json-split-stream": { type: "boolean", noEffect: "every line goes to stderr" },
  "log-json-info-buffer-size": { type: "string", noEffect: "lines are not buffered" },
  "log-text-split-stream": { type: "boolean", noEffect: "every line goes to stderr" },
  "log-text-info-buffer-size": { type: "string", noEffect: "lines are not buffered" },
} as const satisfies Record<string, KubeProxyFlag>;

/**
 * kube-proxy's API-client flags (clientConnection): taken by every command
 * that reads the API server (the node proxy, `serve`, `local`), with the same
 * meaning.
 */
export const kubeClientArgs = {
  "kube-api-content-type": {
    type: "string",
    description: "content type of requests to the API server: application/vnd.kubernetes.protobuf (default) or application/json",
    field: "clientConnection.contentType",
    parse: contentType,
  },
  "kube-api-qps": {
    type: "string",
    valueHint: "float32",
    noEffect: "kpng's client keeps 6 watch connections and no client-side rate limit",
    field: "clientConnection.qps",
    parse: float,
  },
  "kube-api-burst": {
    type: "string",
    valueHint: "int32",
    noEffect: "kpng's client keeps 6 watch connections and no client-side rate limit",
    field: "clientConnection.burst",
    parse: int(0, INT32_MAX),
  },
} as const satisfies Record<string, KubeProxyFlag>;

export const kubeProxyArgs = {
  "init-only": { type: "boolean", description: "set the conntrack sysctls (what needs full privileges), then exit" },
  "bind-address-hard-fail": {
    type: "boolean",
    description: "exit when the health or metrics port cannot be bound (else retry)",
    field: "bindAddressHardFail",
    parse: bool,
  },
  "healthz-port": {
    type: "string",
    valueHint: "int32",
    description: "deprecated: 0 turns the health server off; else the port of an IP-only --healthz-bind-address",
  },
  "metrics-port": {
    type: "string",
    valueHint: "int32",
    description: "deprecated: 0 turns the metrics server off; else the port of an IP-only --metrics-bind-address",
  },
  "oom-score-adj": {
    type: "string",
    valueHint: "int32",
    description: "oom_score_adj of the process, [-1000, 1000] (default -999)",
    field: "linux.oomScoreAdj",
    parse: int(-1000, 1000),
  },
  "detect-local-mode": {
    type: "string",
    description: "how pod traffic is recognised: ClusterCIDR (default), NodeCIDR, BridgeInterface or InterfaceNamePrefix",
    field: "detectLocalMode",
    parse: oneOf(["ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"]),
  },
  "pod-bridge-interface": {
    type: "string",
    description: "detect-local-mode BridgeInterface: pod traffic arrives on this bridge",
    field: "detectLocal.bridgeInterface",
    parse: text,
  },
  "pod-interface-name-prefix": {
    type: "string",
    description: "detect-local-mode InterfaceNamePrefix: pod traffic arrives on interfaces named with this prefix",
    field: "detectLocal.interfaceNamePrefix",
    parse: text,
  },
  "iptables-sync-period": {
    type: "string",
    valueHint: "duration",
    description: "resync interval, outside ipvs mode (kube-proxy's; same as --sync-period)",
  },
  "iptables-min-sync-period": { type: "string", valueHint: "duration", description: "minimum interval between syncs, outside ipvs mode" },
  "ipvs-sync-period": { type: "string", valueHint: "duration", description: "resync interval in ipvs mode" },
  "ipvs-min-sync-period": { type: "string", valueHint: "duration", description: "minimum interval between syncs in ipvs mode" },
  "conntrack-max-per-core": {
    type: "string",
    valueHint: "int32",
    description: "nf_conntrack_max per CPU (0: leave the limit as it is)",
    field: "linux.conntrack.maxPerCore",
    parse: int(0, INT32_MAX),
  },
  "conntrack-min": {
    type: "string",
    valueHint: "int32",
    description: "lower bound of nf_conntrack_max (default 131072)",
    field: "linux.conntrack.min",
    parse: int(0, INT32_MAX),
  },
  "conntrack-tcp-timeout-established": {
    type: "string",
    valueHint: "duration",
    description: "nf_conntrack_tcp_timeout_established (default 24h; 0: leave as is)",
    field: "linux.conntrack.tcpEstablishedTimeout",
    parse: duration,
  },
  "conntrack-tcp-timeout-close-wait": {
    type: "string",
    valueHint: "duration",
    description: "nf_conntrack_tcp_timeout_close_wait (default 1h; 0: leave as is)",
    field: "linux.conntrack.tcpCloseWaitTimeout",
    parse: duration,
  },
  "conntrack-tcp-be-liberal": {
    type: "boolean",
    description: "set nf_conntrack_tcp_be_liberal to 1",
    field: "linux.conntrack.tcpBeLiberal",
    parse: bool,
  },
  "conntrack-udp-timeout": {
    type: "string",
    valueHint: "duration",
    description: "nf_conntrack_udp_timeout (0: leave as is)",
    field: "linux.conntrack.udpTimeout",
    parse: duration,
  },
  "conntrack-udp-timeout-stream": {
    type: "string",
    valueHint: "duration",
    description: "nf_conntrack_udp_timeout_stream (0: leave as is)",
    field: "linux.conntrack.udpStreamTimeout",
    parse: duration,
  },
  "feature-gates": {
    type: "string",
    valueHint: "mapStringBool",
    noEffect: "kpng has no feature gates",
    field: "featureGates",
    parse: mapStringBool,
  },
  ...kubeClientArgs,
  "config-sync-period": {
    type: "string",
    valueHint: "duration",
    noEffect: "kpng's watches need no periodic relist",
    field: "configSyncPeriod",
    parse: duration,
  },
  profiling: { type: "boolean", noEffect: "no /debug/pprof (a Go runtime feature)", field: "enableProfiling", parse: bool },
  "show-hidden-metrics-for-version": {
    type: "string",
    noEffect: "kpng hides no metrics",
    field: "showHiddenMetricsForVersion",
    parse: text,
  },
  "iptables-localhost-nodeports": {
    type: "boolean",
    description: "iptables mode: IPv4 node ports answer on 127.0.0.1 (sets route_localnet=1, with kube-proxy's guard rule; default true)",
    field: "iptables.localhostNodePorts",
    parse: bool,
  },
  "ipvs-exclude-cidrs": {
    type: "string",
    valueHint: "strings",
    description: "ipvs mode: virtual servers on these CIDRs are never deleted as stale (comma-separated)",
    field: "ipvs.excludeCIDRs",
    parse: cidrs,
  },
  "ipvs-strict-arp": {
    type: "boolean",
    description: "ipvs mode: set arp_ignore=1 and arp_announce=2 (MetalLB's layer 2 needs it)",
    field: "ipvs.strictARP",
    parse: bool,
  },
  "ipvs-tcp-timeout": {
    type: "string",
    valueHint: "duration",
    description: "ipvs mode: idle TCP connection timeout (0: leave as is)",
    field: "ipvs.tcpTimeout",
    parse: duration,
  },
  "ipvs-tcpfin-timeout": {
    type: "string",
    valueHint: "duration",
    description: "ipvs mode: TCP timeout after FIN (0: leave as is)",
    field: "ipvs.tcpFinTimeout",
    parse: duration,
  },
  "ipvs-udp-timeout": {
    type: "string",
    valueHint: "duration",
    description: "ipvs mode: UDP timeout (0: leave as is)",
    field: "ipvs.udpTimeout",
    parse: duration,
  },
} as const satisfies Record<string, KubeProxyFlag>;

/** Flag -> the field it sets (v1alpha2 layout), and how its text is read: from the tables above. */
export const fieldOfFlag: Record<string, { field: string; parse: Parse }> = Object.fromEntries(
  Object.entries({ ...logArgs, ...kubeClientArgs, ...kubeProxyArgs } as Record<string, KubeProxyFlag>).flatMap(([flag, def]) =>
    def.field && def.parse ? [[flag, { field: def.field, parse: def.parse }]] : [],
  ),
);

function setField(doc: KubeProxyConfig, path: string, value: unknown) {
  const keys = path.split(".");
  let node = doc as unknown as Record<string, unknown>;
  for (const k of keys.slice(0, -1)) node = (node[k] ??= {}) as Record<string, unknown>;
  node[keys.at(-1)!] = value;
}

/**
 * Writes the given kube-proxy flags into `doc`. The deprecated
 * --iptables-/--ipvs-(min-)sync-period apply only in their mode, as
 * kube-proxy's processV1Alpha1Flags does (--healthz-port/--metrics-port:
 * see configFromFlags).
 */
export function applyKubeProxyFlags(doc: KubeProxyConfig, args: Record<string, unknown>, given: readonly string[]): void {
  for (const flag of given) {
    const bind = fieldOfFlag[flag];
    const raw = args[flag];
    if (!bind || raw === undefined) continue;
    setField(doc, bind.field, typeof raw === "boolean" ? raw : bind.parse(flag, raw as string));
  }
  const ipvs = doc.mode === "ipvs";
  for (const [flag, field, inMode] of [
    ["iptables-sync-period", "syncPeriod", !ipvs],
    ["iptables-min-sync-period", "minSyncPeriod", !ipvs],
    ["ipvs-sync-period", "syncPeriod", ipvs],
    ["ipvs-min-sync-period", "minSyncPeriod", ipvs],
  ] as const) {
    if (inMode && given.includes(flag)) setField(doc, field, duration(flag, args[flag] as string));
  }
}

/** The `noEffect` flags given, for the one WARN line. */
export function noEffectFlags(given: readonly string[], defs: FlagDefs): string[] {
  return given.filter((f) => defs[f]?.noEffect).map((f) => `--${f}`);
}
