// Command-line flags, named like kube-proxy's where kube-proxy has one, and
// their validation into the typed Config. argv.ts parses them with pflag's
// rules; a repeated flag keeps every value in the canonical rawArgs, which
// `repeated()` reads. kube-proxy's other flags are in kube-proxy-flags.ts.

import type { ArgsDef } from "citty";
import { hostname } from "node:os";
export { checkUnknownFlags } from "./argv.ts";
import { configFromKubeProxy } from "./config-file.ts";
import { applyKubeProxyFlags } from "./kube-proxy-flags.ts";
import { defaultConfig, type Config } from "./config.ts";
import { checkLocalDetect } from "./detect-local.ts";
import { formatGoDuration, parseGoDuration } from "./duration.ts";
import { invalid } from "../errors.ts";
import { cidrFamily, ipFamily, isCIDR } from "../net/ip.ts";
import { backendOfMode, isBindAddress, kubeProxyDefaults, modeOfBackend } from "./kube-proxy-config.ts";

export const sourceArgs = {
  input: { type: "string", description: "read Kubernetes objects from this YAML/JSON file (watched for edits)" },
  kubeconfig: { type: "string", description: "path to a kubeconfig file" },
  master: { type: "string", description: "address of the Kubernetes API server (overrides the kubeconfig)" },
  api: {
    type: "string",
    description:
      "node agent: follow a central brain's globalv1 stream at unix:///path or tcp://HOST:PORT instead of the API server (repeatable: fail over in order)",
  },
  "node-name": { type: "string", alias: ["hostname-override"], description: "the node this proxy serves (default: the hostname)" },
  "service-proxy-name": { type: "string", description: "also serve services labelled service.kubernetes.io/service-proxy-name=NAME" },
  config: { type: "string", description: "kube-proxy configuration file (KubeProxyConfiguration v1alpha1 or v1alpha2)" },
  "write-config-version": {
    type: "string",
    description:
      "apiVersion --write-config-to writes: v1alpha1 (default: what kube-proxy reads) or v1alpha2 (default when --config is v1alpha2)",
  },
  "min-sync-period": { type: "string", description: "minimum interval between recomputations (e.g. 1s)" },
  "sync-period": { type: "string", description: "interval of full resyncs of the rules (e.g. 30s)" },
} as const satisfies ArgsDef;

export const proxyArgs = {
  backend: {
    type: "string",
    description:
      "built-in backend: nft, iptables, ipvs, winkernel, ebpf, userspace (repeatable: each runs; kube-proxy's nftables and kernelspace also work; default as kube-proxy: iptables, or the config file's mode)",
  },
  "proxy-mode": {
    type: "string",
    description:
      "kube-proxy's mode: iptables, ipvs, nftables, kernelspace (or a backend name); given twice, the last one wins, as in kube-proxy",
  },
  plugin: { type: "string", description: "load a backend from a .ts/.js file (repeatable)" },
  "dry-run": { type: "boolean", description: "print what backends would apply instead of applying it" },
  once: { type: "boolean", description: "exit after the first full sync is applied" },
  cleanup: { type: "boolean", description: "remove every rule kpng created, then exit" },
  "cluster-cidr": { type: "string", description: "pod CIDRs (comma-separated); traffic from outside them is masqueraded" },
  "nodeport-addresses": { type: "string", description: "CIDRs or 'primary' whose addresses answer node ports (comma-separated)" },
  "node-ip": {
    type: "string",
    alias: ["bind-address"],
    description: "this node's IPs (comma-separated; default: the Node's InternalIP addresses)",
  },
  "iptables-masquerade-bit": { type: "string", description: "fwmark bit (0-31) marking packets to masquerade (default 14)" },
  "masquerade-all": { type: "boolean", description: "masquerade all traffic to service IPs" },
  "ipvs-scheduler": { type: "string", description: "IPVS scheduler (default rr)" },
  "userspace-mode": {
    type: "string",
    description:
      "userspace backend: bind (relays listen on the service IPs, made local by routes; default) or redirect (nftables redirects to the relays)",
  },
  "healthz-bind-address": { type: "string", description: "address:port for /healthz and /livez (default 0.0.0.0:10256)" },
  "metrics-bind-address": { type: "string", description: "address:port for /metrics (default 127.0.0.1:10249)" },
  "write-config-to": {
    type: "string",
    description: "write the effective configuration (v1alpha1 unless --write-config-version v1alpha2) to this file and exit",
  },
  "ebpf-cgroup": {
    type: "string",
    description: "ebpf backend: the cgroup v2 directory to attach to (default: the root of the cgroup v2 hierarchy)",
  },
  "ebpf-pin-dir": {
    type: "string",
    description: "ebpf backend: where on a bpf file system its maps and links are pinned (default /sys/fs/bpf/kpng)",
  },
} as const satisfies ArgsDef;

export const listenArgs = {
  listen: {
    type: "string",
    description:
      "serve the API on unix:///path or tcp://127.0.0.1:PORT (repeatable); without it a node's kpng serves kpng get/verify on unix:///run/kpng.sock; --listen= (empty) serves nothing",
  },
  "listen-any": {
    type: "boolean",
    description: "allow plaintext --listen on a non-loopback address (logged as a WARN; the API reveals cluster topology)",
  },
  "listen-tls-crt": {
    type: "string",
    description: "serve every TCP --listen with TLS: the server's certificate (PEM; re-read when it changes)",
  },
  "listen-tls-key": { type: "string", description: "the key of --listen-tls-crt (PEM)" },
  "listen-tls-ca": { type: "string", description: "mutual TLS: accept clients whose certificate this CA signed (PEM bundle)" },
  "listen-token-review": {
    type: "string",
    description:
      "accept ServiceAccount tokens (audience kpng) of these users, checked by TokenReview (comma-separated, e.g. system:serviceaccount:kube-system:kpng-agent)",
  },
} as const satisfies ArgsDef;

/** A client of a brain's API (node agent, sidecar) over TCP. */
export const apiClientArgs = {
  "tls-ca": { type: "string", description: "TLS to --api: the CA that signed the brain's certificate (PEM; default: the system's roots)" },
  "tls-crt": { type: "string", description: "TLS to --api: this client's certificate (PEM)" },
  "tls-key": { type: "string", description: "the key of --tls-crt (PEM)" },
  "token-file": {
    type: "string",
    description: "TLS to --api, authenticated by this ServiceAccount token (a projected token, audience kpng; re-read at each connection)",
  },
  "api-plaintext": { type: "boolean", description: "allow plaintext to a non-loopback --api (logged as a WARN)" },
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
  return out
    .flatMap((s) => s.split(","))
    .map((s) => s.trim())
    .filter(Boolean);
}

/** `--listen=` (or `--listen ""`): given, and empty — serve nothing, as kube-proxy's "set empty to disable". */
export const listenOff = (rawArgs: readonly string[]): boolean =>
  rawArgs.some((a, i) => a === "--listen=" || (a === "--listen" && rawArgs[i + 1] === "")) && !repeated(rawArgs, "listen").length;

const durationFlag = (flag: string, s: string): number => {
  // A bare number is seconds (kpng's first flags took that); otherwise Go's duration syntax, as kube-proxy.
  const n = /^\d+(\.\d+)?$/.test(s) ? Number(s) : parseGoDuration(s);
  if (n === null || n < 0) throw invalid(`flag --${flag}: "${s}" is not a duration (e.g. 1s, 500ms, 2m)`);
  return n;
};

const onePerFamily = (xs: string[], family: (s: string) => string | null) => xs.length <= 2 && new Set(xs.map(family)).size === xs.length;

/** Parsed flag values by canonical name (argv.ts), as every command receives them. */
export type Args = Record<string, string | number | boolean | string[] | undefined>;

/** kube-proxy 1.36's mode when none is configured (platformApplyDefaults): iptables on Linux, kernelspace on Windows. */
export const defaultBackend = (platform: string = process.platform): string => (platform === "win32" ? "winkernel" : "iptables");

/**
 * The backends the flags name, kube-proxy's mode names mapped: every
 * --backend (kpng's own flag, repeatable: each one runs), then the last
 * --proxy-mode (kube-proxy's flag: pflag keeps a repeated flag's last value,
 * so an operator's override appended to a DaemonSet's args wins).
 */
export function flagBackends(rawArgs: readonly string[]): string[] {
  const names = [...repeated(rawArgs, "backend"), ...repeated(rawArgs, "proxy-mode").slice(-1)].map(backendOfMode);
  return [...new Set(names)];
}

/** Built-in backend names from --backend/--proxy-mode (flagBackends), else the config file's mode, else kube-proxy's default. */
export function backendNames(rawArgs: readonly string[], cfg: Config): string[] {
  const named = flagBackends(rawArgs);
  if (named.length || repeated(rawArgs, "plugin").length) return named;
  return [cfg.mode || defaultBackend()];
}

/**
 * kube-proxy refuses a mode its platform lacks (kernelspace is Windows' HNS).
 * On Linux the winkernel backend could only record HNS calls: without
 * --dry-run kpng would say it synced and program nothing, so it is an error.
 */
export function checkBackendPlatform(names: readonly string[], dryRun: boolean, platform: string = process.platform): void {
  if (platform !== "win32" && !dryRun && names.includes("winkernel"))
    throw invalid(
      `mode kernelspace (--backend winkernel) programs Windows HNS and this node runs ${platform}: run it on a Windows node, or add --dry-run to print its HNS calls`,
    );
}

/** Where the mode came from, for the start-up line. */
export function modeSource(rawArgs: readonly string[], cfg: Config): "flag" | "config" | "default" {
  if (flagBackends(rawArgs).length || repeated(rawArgs, "plugin").length) return "flag";
  return cfg.mode ? "config" : "default";
}

/**
 * Flags -> Config, on top of a base (defaults, or what a --config file gave).
 * A flag given explicitly wins over the file; kube-proxy flags are also
 * written into `cfg.kubeProxy`, so `--write-config-to` records them.
 * Throws a KpngError naming the flag. The steps run in this order: an error
 * names the first bad flag in it.
 */
export function configFromFlags(
  args: Args,
  rawArgs: readonly string[],
  base: Config = defaultConfig(),
  given: readonly string[] = givenFlags(rawArgs),
): Config {
  const modes = flagBackends(rawArgs);
  const cfg = configFromKubeProxyFlags(args, base, given, modes[0]);
  const flags: FlagValues = {
    rawArgs,
    args,
    str: (k) => (typeof args[k] === "string" ? (args[k] as string) : undefined),
  };
  applyNodeFlags(cfg, flags);
  applyAddressFlags(cfg, flags);
  applyProxierFlags(cfg, flags);
  applySyncPeriodFlags(cfg, flags);
  applyServerFlags(cfg, flags);
  if (modes.length) cfg.mode = modes[0];
  // After the file and the flags together: either may name the interface.
  checkLocalDetect(cfg.localDetect);
  return cfg;
}

/** The flags as each step of configFromFlags reads them. */
interface FlagValues {
  rawArgs: readonly string[];
  args: Args;
  /** a string flag's value, undefined when not given */
  str(k: string): string | undefined;
}

/**
 * The base with the mode and kube-proxy's flags bound to configuration fields
 * (conntrack, logging, ...) applied to its document, then the Config from it.
 */
function configFromKubeProxyFlags(args: Args, base: Config, given: readonly string[], backend: string | undefined): Config {
  const withMode = structuredClone(base.kubeProxy);
  if (backend !== undefined) withMode.mode = modeOfBackend(backend);
  applyKubeProxyFlags(withMode, args, given);
  const derived = configFromKubeProxy(withMode, base);
  // The sync periods change only through a flag: a base without a file keeps kpng's own defaults (configFromCLIDefaults).
  const periodFlags = ["iptables-sync-period", "iptables-min-sync-period", "ipvs-sync-period", "ipvs-min-sync-period"].some((f) =>
    given.includes(f),
  );
  if (periodFlags) return derived;
  return {
    ...derived,
    syncPeriodSeconds: base.syncPeriodSeconds,
    minSyncPeriodSeconds: base.minSyncPeriodSeconds,
    ipvs: { ...derived.ipvs, syncPeriodSeconds: base.ipvs.syncPeriodSeconds, minSyncPeriodSeconds: base.ipvs.minSyncPeriodSeconds },
  };
}

/** --node-name (--hostname-override), --service-proxy-name, --kubeconfig */
function applyNodeFlags(cfg: Config, { str }: FlagValues): void {
  const doc = cfg.kubeProxy;
  // As kube-proxy's processHostnameOverrideFlag: "" means unset, blanks alone are an error, the name is trimmed.
  const name = str("node-name");
  if (name !== undefined && name !== "") {
    if (!name.trim()) throw invalid(`flag --hostname-override: "${name}" is empty`);
    cfg.nodeName = name.trim().toLowerCase();
    doc.hostnameOverride = name.trim();
  }
  if (!cfg.nodeName) cfg.nodeName = (process.env.NODE_NAME ?? hostname()).toLowerCase();
  if (str("service-proxy-name") !== undefined) cfg.serviceProxyName = str("service-proxy-name")!;
  if (str("kubeconfig") !== undefined) cfg.kubeconfig = doc.clientConnection.kubeconfig = str("kubeconfig")!;
}

/** --cluster-cidr, --nodeport-addresses, --node-ip (--bind-address): lists, at most one per family where kube-proxy says so */
function applyAddressFlags(cfg: Config, { rawArgs }: FlagValues): void {
  const doc = cfg.kubeProxy;
  const cidrs = repeated(rawArgs, "cluster-cidr");
  for (const c of cidrs) if (!isCIDR(c)) throw invalid(`flag --cluster-cidr: "${c}" is not a valid CIDR`);
  if (!onePerFamily(cidrs, cidrFamily)) throw invalid(`flag --cluster-cidr: "${cidrs.join(",")}" must hold at most one CIDR per IP family`);
  if (cidrs.length) cfg.clusterCIDRs = doc.detectLocal.clusterCIDRs = cidrs;

  const npa = repeated(rawArgs, "nodeport-addresses");
  for (const c of npa)
    if (c !== "primary" && !isCIDR(c)) throw invalid(`flag --nodeport-addresses: "${c}" is not a valid CIDR or "primary"`);
  if (npa.length) cfg.nodePortAddresses = doc.nodePortAddresses = npa;

  // kube-proxy's --bind-address 0.0.0.0 (its default) means "detect the node IP".
  const ips = repeated(rawArgs, "node-ip", ["bind-address"]).filter((ip) => ip !== "0.0.0.0" && ip !== "::");
  for (const ip of ips) if (!ipFamily(ip)) throw invalid(`flag --node-ip: "${ip}" is not a valid IP address`);
  if (!onePerFamily(ips, ipFamily)) throw invalid(`flag --node-ip: "${ips.join(",")}" must hold at most one IP per family`);
  if (ips.length) cfg.nodeIPs = doc.nodeIPOverride = ips;
}

const IPVS_SCHEDULERS = ["rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "sed", "nq", "dh", "mh"] as const;

/** What the backends program differently: masquerading, --dry-run, ebpf's places, the IPVS scheduler, userspace's mode */
function applyProxierFlags(cfg: Config, { args, str }: FlagValues): void {
  const doc = cfg.kubeProxy;
  if (args["masquerade-all"] === true) cfg.masqueradeAll = doc.linux.masqueradeAll = true;
  if (args["dry-run"] === true) cfg.dryRun = true;
  cfg.ebpf = { cgroup: str("ebpf-cgroup") ?? cfg.ebpf.cgroup, pinDir: str("ebpf-pin-dir") ?? cfg.ebpf.pinDir };

  const bit = str("iptables-masquerade-bit");
  if (bit !== undefined) {
    const n = Number(bit);
    if (!/^\d+$/.test(bit) || n > 31) throw invalid(`flag --iptables-masquerade-bit: "${bit}" is out of range [0, 31]`);
    cfg.masqueradeBit = doc.iptables.masqueradeBit = doc.ipvs.masqueradeBit = doc.nftables.masqueradeBit = n;
  }
  const scheduler = str("ipvs-scheduler");
  if (scheduler) {
    if (!IPVS_SCHEDULERS.includes(scheduler as (typeof IPVS_SCHEDULERS)[number]))
      throw invalid(`flag --ipvs-scheduler: "${scheduler}" must be one of ${IPVS_SCHEDULERS.join(", ")}`);
    cfg.ipvs.scheduler = doc.ipvs.scheduler = scheduler as (typeof IPVS_SCHEDULERS)[number];
  }
  const usMode = str("userspace-mode");
  if (usMode !== undefined) {
    if (usMode !== "bind" && usMode !== "redirect") throw invalid(`flag --userspace-mode: "${usMode}" must be bind or redirect`);
    cfg.userspaceMode = usMode;
  }
}

/** --min-sync-period and --sync-period (every backend's), the first no greater than the second */
function applySyncPeriodFlags(cfg: Config, { str }: FlagValues): void {
  const doc = cfg.kubeProxy;
  const minSync = str("min-sync-period");
  if (minSync) {
    cfg.minSyncPeriodSeconds = cfg.ipvs.minSyncPeriodSeconds = durationFlag("min-sync-period", minSync);
    doc.minSyncPeriod = formatGoDuration(cfg.minSyncPeriodSeconds);
  }
  const sync = str("sync-period");
  if (sync) {
    const n = durationFlag("sync-period", sync);
    if (n === 0) throw invalid(`flag --sync-period: "${sync}" must be greater than 0`);
    cfg.syncPeriodSeconds = cfg.ipvs.syncPeriodSeconds = n;
    doc.syncPeriod = formatGoDuration(n);
  }
  if (cfg.minSyncPeriodSeconds > cfg.syncPeriodSeconds) {
    throw invalid(
      `flag --min-sync-period: ${formatGoDuration(cfg.minSyncPeriodSeconds)} must not be greater than the sync period (${formatGoDuration(cfg.syncPeriodSeconds)})`,
    );
  }
}

/**
 * --healthz-bind-address and --metrics-bind-address. kube-proxy's IPPortVar takes a bare IP too;
 * the deprecated --healthz-port/--metrics-port give such an IP its port (AppendPortIfNeeded: an
 * address with a port keeps it), and 0 turns the server off.
 */
function applyServerFlags(cfg: Config, { str }: FlagValues): void {
  const doc = cfg.kubeProxy;
  for (const [server, defaultPort] of [
    ["healthz", 10256],
    ["metrics", 10249],
  ] as const) {
    const f = `${server}-bind-address` as const;
    const portText = str(`${server}-port`);
    if (portText !== undefined && (!/^\d+$/.test(portText) || Number(portText) > 65535))
      throw invalid(`flag --${server}-port: "${portText}" must be a port number (0 turns the server off)`);
    let val = str(f);
    if (val !== undefined && ipFamily(val))
      val = ipFamily(val) === "v6" ? `[${val}]:${portText ?? defaultPort}` : `${val}:${portText ?? defaultPort}`;
    if (portText !== undefined && Number(portText) === 0) val = "";
    if (val === undefined) continue;
    if (!isBindAddress(val)) throw invalid(`flag --${f}: "${val}" must be IP:port (IPv6 in brackets), an IP, or "" to turn the server off`);
    if (server === "healthz") cfg.healthzBindAddress = doc.healthzBindAddress = val;
    else cfg.metricsBindAddress = doc.metricsBindAddress = val;
  }
}

/** Canonical flag names in `--name=value` rawArgs. */
export const givenFlags = (rawArgs: readonly string[]) => [
  ...new Set(rawArgs.filter((a) => a.startsWith("--")).map((a) => a.slice(2).split("=")[0])),
];

/**
 * The base Config when there is no --config file: kube-proxy's defaults
 * (v1alpha1's, as kube-proxy starts without a file), except the sync periods,
 * which keep kpng's own defaults (defaultConfig).
 */
export function configFromCLIDefaults(): Config {
  const kpng = defaultConfig();
  const cfg = configFromKubeProxy(kubeProxyDefaults(), kpng);
  return {
    ...cfg,
    syncPeriodSeconds: kpng.syncPeriodSeconds,
    minSyncPeriodSeconds: kpng.minSyncPeriodSeconds,
    ipvs: { ...cfg.ipvs, syncPeriodSeconds: kpng.ipvs.syncPeriodSeconds, minSyncPeriodSeconds: kpng.ipvs.minSyncPeriodSeconds },
  };
}
