// Command-line flags, named like kube-proxy's where kube-proxy has one, and
// their validation into the typed Config. citty keeps only the last value of
// a repeated flag and accepts unknown ones, so both are handled here from the
// raw argv.

import type { ArgsDef } from "citty";
import { hostname } from "node:os";
import * as v from "valibot";
import { defaultConfig, type Config } from "./config.ts";
import { invalid } from "./errors.ts";
import { ipFamily, isCIDR } from "./k8s/ip.ts";

export const sourceArgs = {
  input: { type: "string", description: "read Kubernetes objects from this YAML/JSON file (watched for edits)" },
  kubeconfig: { type: "string", description: "path to a kubeconfig file" },
  master: { type: "string", description: "address of the Kubernetes API server (overrides the kubeconfig)" },
  "node-name": { type: "string", alias: ["hostname-override"], description: "the node this proxy serves (default: the hostname)" },
  "service-proxy-name": { type: "string", description: "also serve services labelled service.kubernetes.io/service-proxy-name=NAME" },
  config: { type: "string", description: "kube-proxy configuration file (KubeProxyConfiguration v1alpha1 or v1alpha2)" },
  "min-sync-period": { type: "string", description: "minimum interval between recomputations (e.g. 1s)" },
} as const satisfies ArgsDef;

export const proxyArgs = {
  backend: { type: "string", alias: ["proxy-mode"], description: "built-in backend: nft, iptables, ipvs, winkernel (repeatable)" },
  plugin: { type: "string", description: "load a backend from a .ts/.js file (repeatable)" },
  "dry-run": { type: "boolean", description: "print what backends would apply instead of applying it" },
  once: { type: "boolean", description: "exit after the first full sync is applied" },
  cleanup: { type: "boolean", description: "remove every rule kpng created, then exit" },
  "cluster-cidr": { type: "string", description: "pod CIDRs (comma-separated); traffic from outside them is masqueraded" },
  "nodeport-addresses": { type: "string", description: "CIDRs or 'primary' whose addresses answer node ports (comma-separated)" },
  "node-ip": { type: "string", description: "this node's IPs (comma-separated; default: the Node's InternalIP addresses)" },
  "masquerade-all": { type: "boolean", description: "masquerade all traffic to service IPs" },
  "ipvs-scheduler": { type: "string", description: "IPVS scheduler (default rr)" },
  "healthz-bind-address": { type: "string", description: "address:port for /healthz and /livez (default 0.0.0.0:10256)" },
  "metrics-bind-address": { type: "string", description: "address:port for /metrics (default 127.0.0.1:10249)" },
  "write-config-to": { type: "string", description: "write the effective configuration (v1alpha2) to this file and exit" },
} as const satisfies ArgsDef;

export const listenArgs = {
  listen: { type: "string", description: "serve the API on unix:///path or tcp://127.0.0.1:PORT (repeatable)" },
  "listen-any": { type: "boolean", description: "allow --listen on a non-loopback address (the API reveals cluster topology)" },
} as const satisfies ArgsDef;

/** All values of a flag given once or several times, comma lists split. */
export function repeated(rawArgs: readonly string[], name: string, aliases: readonly string[] = []): string[] {
  const names = [name, ...aliases].map((n) => `--${n}`);
  const out: string[] = [];
  for (let i = 0; i < rawArgs.length; i++) {
    const a = rawArgs[i];
    const eq = a.indexOf("=");
    if (eq > 0 && names.includes(a.slice(0, eq))) out.push(a.slice(eq + 1));
    else if (names.includes(a) && i + 1 < rawArgs.length) out.push(rawArgs[++i]);
  }
  return out.flatMap((s) => s.split(",")).map((s) => s.trim()).filter(Boolean);
}

/** Rejects flags no command defines (citty would silently accept them). */
export function checkUnknownFlags(rawArgs: readonly string[], defs: ArgsDef): void {
  const known = new Set<string>(["help", "h", "version"]);
  for (const [name, def] of Object.entries(defs)) {
    known.add(name);
    const alias = (def as { alias?: string | string[] }).alias;
    for (const a of typeof alias === "string" ? [alias] : (alias ?? [])) known.add(a);
  }
  for (const a of rawArgs) {
    if (!a.startsWith("-") || a === "-" || a === "--") continue;
    const name = a.replace(/^--?/, "").split("=")[0].replace(/^no-/, "");
    if (!known.has(name) && !(name.length === 1 && known.has(name))) throw invalid(`flag ${a.split("=")[0]}: unknown flag`);
  }
}

const seconds = (flag: string, s: string): number => {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(s);
  if (!m) throw invalid(`flag --${flag}: "${s}" is not a duration (e.g. 1s, 500ms, 2m)`);
  const n = Number(m[1]);
  return m[2] === "ms" ? n / 1000 : m[2] === "m" ? n * 60 : m[2] === "h" ? n * 3600 : n;
};

const hostPort = v.pipe(v.string(), v.regex(/^(\[[0-9a-fA-F:.]+\]|[0-9.]+|[a-zA-Z0-9.-]*):\d{1,5}$/, "must be address:port"));

type Args = Record<string, string | number | boolean | string[] | undefined>;

/** Flags -> Config, on top of a base (defaults, or what a --config file gave). Throws KpngError naming the flag. */
export function configFromFlags(args: Args, rawArgs: readonly string[], base: Config = defaultConfig()): Config {
  const cfg: Config = structuredClone(base);
  const str = (k: string) => (typeof args[k] === "string" ? (args[k] as string) : undefined);
  const name = str("node-name");
  if (name !== undefined) cfg.nodeName = name;
  if (!cfg.nodeName) cfg.nodeName = (process.env.NODE_NAME ?? hostname()).toLowerCase();
  if (str("service-proxy-name") !== undefined) cfg.serviceProxyName = str("service-proxy-name")!;
  const cidrs = repeated(rawArgs, "cluster-cidr");
  for (const c of cidrs) if (!isCIDR(c)) throw invalid(`flag --cluster-cidr: "${c}" is not a valid CIDR`);
  if (cidrs.length) cfg.clusterCIDRs = cidrs;
  const npa = repeated(rawArgs, "nodeport-addresses");
  for (const c of npa) if (c !== "primary" && !isCIDR(c)) throw invalid(`flag --nodeport-addresses: "${c}" is not a valid CIDR or "primary"`);
  if (npa.length) cfg.nodePortAddresses = npa;
  const ips = repeated(rawArgs, "node-ip");
  for (const ip of ips) if (!ipFamily(ip)) throw invalid(`flag --node-ip: "${ip}" is not a valid IP address`);
  if (ips.length) cfg.nodeIPs = ips;
  if (args["masquerade-all"] === true) cfg.masqueradeAll = true;
  if (args["dry-run"] === true) cfg.dryRun = true;
  if (str("ipvs-scheduler")) cfg.ipvs.scheduler = str("ipvs-scheduler")!;
  if (str("min-sync-period")) cfg.minSyncPeriodSeconds = seconds("min-sync-period", str("min-sync-period")!);
  for (const f of ["healthz-bind-address", "metrics-bind-address"] as const) {
    const val = str(f);
    if (val === undefined) continue;
    if (val !== "" && !v.is(hostPort, val)) throw invalid(`flag --${f}: "${val}" must be address:port`);
    cfg[f === "healthz-bind-address" ? "healthzBindAddress" : "metricsBindAddress"] = val;
  }
  return cfg;
}
