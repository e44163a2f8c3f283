// Which fields of a KubeProxyConfiguration kpng does not act on, as data: a
// field set to anything but kube-proxy's default (or, where kpng differs from
// kube-proxy even at the default, to the value that matters) is named in a
// warning at start-up. Every other field is applied (see configFromKubeProxy,
// conntrack-sysctl.ts, node-setup.ts, proxy-servers.ts); none is dropped without a word.

import { kubeProxyDefaults, type KubeProxyConfig } from "./kube-proxy-config.ts";

interface FieldRule {
  field: string;
  /** why kpng does not act on it */
  why: string;
  /** when to warn; default: the value differs from kube-proxy's default */
  when?: (doc: KubeProxyConfig) => boolean;
}

const rules: FieldRule[] = [
  { field: "featureGates", why: "kpng has no feature gates", when: (d) => Object.keys(d.featureGates).length > 0 },
  { field: "clientConnection.qps", why: "kpng's client has no client-side rate limit" },
  { field: "clientConnection.burst", why: "kpng's client has no client-side rate limit" },
  {
    field: "logging.vmodule",
    why: "kpng has no per-file verbosity",
    when: (d) => (Array.isArray(d.logging.vmodule) ? d.logging.vmodule.length > 0 : !!d.logging.vmodule),
  },
  {
    field: "logging.options",
    why: "every line goes to stderr, unbuffered",
    when: (d) => /"splitStream":true|"infoBufferSize":"?[1-9]/.test(JSON.stringify(d.logging.options ?? {})),
  },
  { field: "enableProfiling", why: "no /debug/pprof (a Go runtime feature)" },
  { field: "showHiddenMetricsForVersion", why: "kpng hides no metrics" },
  { field: "ipFamilyPolicy", why: "kpng serves every IP family the node has" },
  { field: "configSyncPeriod", why: "kpng's watches need no periodic relist" },
  {
    field: "iptables.snatNodeInternalIP",
    why: "kpng masquerades to the outgoing interface's address",
    when: (d) => d.iptables.snatNodeInternalIP,
  },
  { field: "winkernel.rootHnsEndpointName", why: "kpng's winkernel backend does not act on it" },
  { field: "winkernel.forwardHealthCheckVip", why: "kpng's winkernel backend does not act on it" },
];

const at = (doc: unknown, path: string): unknown =>
  path.split(".").reduce<unknown>((o, k) => (o as Record<string, unknown> | undefined)?.[k], doc);
const shown = (x: unknown) => (typeof x === "string" ? (x === "" ? '""' : x) : JSON.stringify(x));

/** One line per field kpng does not act on, `field: value: why`. */
export function fieldWarnings(doc: KubeProxyConfig): string[] {
  const defaults = kubeProxyDefaults();
  const out: string[] = [];
  for (const r of rules) {
    const value = at(doc, r.field);
    const differs = r.when ? r.when(doc) : JSON.stringify(value) !== JSON.stringify(at(defaults, r.field));
    if (differs) out.push(`${r.field}: ${shown(value)} has no effect in kpng: ${r.why}`);
  }
  if (doc.windows.runAsService) out.push("windows.runAsService: not supported by kpng, ignored");
  return out;
}

/** The fields kpng accepts without acting on them, and why: docs/configuration.md lists them (docs/generate.ts). */
export const noEffectFields: ReadonlyArray<{ field: string; why: string }> = rules.map(({ field, why }) => ({ field, why }));

/** Fields fieldWarnings judges by their value rather than by a rule above: what kpng makes of them. */
export const partlyAppliedFields: Readonly<Record<string, string>> = {
  detectLocalMode: "ClusterCIDR only: another mode is named in a warning, and pod traffic is recognised by detectLocal.clusterCIDRs",
  "windows.runAsService": "not supported: true is named in a warning and ignored",
};
