// `--config FILE`: a KubeProxyConfiguration (v1alpha1 or v1alpha2) read,
// validated, converted to the v1alpha2 layout and turned into kpng's Config;
// `--write-config-to FILE`: the effective document written back, as v1alpha1
// (what every kube-proxy reads, so a rollback works) unless v1alpha2 is asked
// for (`--write-config-version`, or a v1alpha2 --config file).
//
// Every problem is one line naming the file and the field. A v1alpha1 file
// with unknown or repeated fields is decoded leniently with a warning, as
// kube-proxy does (strict first, then lenient); in v1alpha2 they are errors.
// With `configHardFail: false` (v1alpha2 only) problems are warnings instead:
// the offending field is dropped (its default applies) and the rest loads.

import { writeFile } from "node:fs/promises";
import * as v from "valibot";
import { parseDocument, stringify } from "yaml";
import { fastYaml } from "./yaml-fast.ts";
import { defaultConfig, type Config } from "./config.ts";
import { parseGoDuration } from "./duration.ts";
import { errorMessage, invalid } from "../errors.ts";
import {
  backendOfMode,
  convertV1alpha1,
  crossFieldIssues,
  V1ALPHA1,
  V1ALPHA2,
  V1alpha1Schema,
  V1alpha2Schema,
  type KubeProxyConfig,
  toV1alpha1,
} from "./kube-proxy-config.ts";
import { fieldWarnings } from "./config-fields.ts";
import { localDetectOf } from "./detect-local.ts";
import { fieldPath, issueKeys, issueProblem } from "../valibot-issues.ts";
import { readTextFile } from "../read-text.ts";

export interface LoadedConfig {
  doc: KubeProxyConfig;
  /** the file's own apiVersion */
  apiVersion: typeof V1ALPHA1 | typeof V1ALPHA2;
  /** one line each: problems ignored under configHardFail: false, and settings kpng does not act on */
  warnings: string[];
  /** the file names a minSyncPeriod of its own (not absent, not 0s, which kube-proxy reads as its default) */
  minSyncPeriodSet: boolean;
}

/** Whether `raw` sets a minSyncPeriod for its mode: kpng paces syncs by their cost unless an operator sets one. */
function setsMinSyncPeriod(raw: Record<string, unknown>): boolean {
  const section = (k: string) => (raw[k] && typeof raw[k] === "object" ? (raw[k] as Record<string, unknown>) : {});
  const mode = raw.mode === "ipvs" || raw.mode === "nftables" ? raw.mode : "iptables";
  const value = raw.apiVersion === V1ALPHA1 ? section(mode).minSyncPeriod : raw.minSyncPeriod;
  return typeof value === "string" && (parseGoDuration(value) ?? 0) > 0;
}

interface Problem {
  /** field path as in the file: `iptables.masqueradeBit`, `nodePortAddresses[1]` */
  path: Array<string | number>;
  message: string;
}

function toProblem(issue: v.BaseIssue<unknown>): Problem {
  const path = issueKeys(issue);
  const unknownKey = issue.type === "strict_object" && issue.path?.at(-1)?.origin === "key";
  if (unknownKey) return { path, message: "unknown field" };
  return { path, message: issueProblem(issue) };
}

/** Validates one parsed document against the schema of its apiVersion. */
function problemsOf(raw: Record<string, unknown>): { problems: Problem[]; doc?: KubeProxyConfig } {
  const schema = raw.apiVersion === V1ALPHA1 ? V1alpha1Schema : V1alpha2Schema;
  const res = v.safeParse(schema, raw, { abortPipeEarly: true });
  if (!res.success) return { problems: res.issues.map(toProblem) };
  const cross = crossFieldIssues(res.output).map(([f, message]) => ({ path: f.split("."), message }));
  if (cross.length) return { problems: cross };
  const doc = res.output.apiVersion === V1ALPHA1 ? v.parse(V1alpha2Schema, convertV1alpha1(res.output)) : (res.output as KubeProxyConfig);
  return { problems: [], doc };
}

function dropField(raw: Record<string, unknown>, path: ReadonlyArray<string | number>) {
  let node: unknown = raw;
  for (const k of path.slice(0, -1)) node = (node as Record<string | number, unknown> | undefined)?.[k];
  const last = path.at(-1);
  if (last === undefined || typeof node !== "object" || node === null) return;
  if (Array.isArray(node) && typeof last === "number") node.splice(last, 1);
  else delete (node as Record<string, unknown>)[last];
}

/** The `yaml` library's reading of the file: what the fast path leaves (an error to name, a key that may repeat). */
function parseYaml(file: string, text: string, warnings: string[]): unknown {
  let parsed = parseDocument(text, { uniqueKeys: true });
  const err = parsed.errors[0];
  if (err?.code === "DUPLICATE_KEY" && /apiVersion:\s*["']?kubeproxy\.config\.k8s\.io\/v1alpha1/.test(text)) {
    // kube-proxy's strict decoding refuses a repeated field; its lenient v1alpha1 decoding keeps the last one.
    parsed = parseDocument(text, { uniqueKeys: false });
    warnings.push(`${file}: using lenient decoding as strict decoding failed: ${err.message.split("\n")[0]} (the last value is used)`);
  } else if (err) throw invalid(`${file}: not valid YAML or JSON: ${err.message.split("\n")[0]}`);
  return parsed.toJS() as unknown;
}

/** Parses and validates file contents; throws a one-line KpngError naming the file and field. */
export function parseKubeProxyConfig(file: string, text: string): LoadedConfig {
  const warnings: string[] = [];
  const raw = fastYaml(text) ?? parseYaml(file, text, warnings);
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw invalid(`${file}: not a KubeProxyConfiguration mapping`);
  const doc = raw as Record<string, unknown>;
  if (doc.apiVersion !== V1ALPHA1 && doc.apiVersion !== V1ALPHA2) {
    throw invalid(`${file}: apiVersion: ${JSON.stringify(doc.apiVersion ?? null)} is not supported (use ${V1ALPHA1} or ${V1ALPHA2})`);
  }
  // Only v1alpha2 has the switch; a non-boolean value cannot switch anything off.
  const hardFail = !(doc.apiVersion === V1ALPHA2 && doc.configHardFail === false);
  const apiVersion = doc.apiVersion;
  const minSyncPeriodSet = setsMinSyncPeriod(doc);
  // v1alpha1's portRange has no v1alpha2 field: kube-proxy has not read it since its userspace mode went.
  if (apiVersion === V1ALPHA1 && typeof doc.portRange === "string" && doc.portRange !== "") {
    warnings.push(
      `${file}: portRange: ${doc.portRange} has no effect in kpng: unused, as in kube-proxy since its userspace mode was removed`,
    );
  }
  // Each round drops the fields that failed; a field's default is always valid, so this ends.
  for (let round = 0; round < 50; round++) {
    const { problems, doc: out } = problemsOf(doc);
    if (out) return { doc: out, apiVersion, warnings: [...warnings, ...fieldWarnings(out).map((w) => `${file}: ${w}`)], minSyncPeriodSet };
    // v1alpha1: unknown fields are what strict decoding refuses and lenient decoding drops.
    const unknown = apiVersion === V1ALPHA1 ? problems.filter((p) => p.message === "unknown field") : [];
    if (unknown.length && unknown.length === problems.length) {
      warnings.push(
        `${file}: using lenient decoding as strict decoding failed: ${unknown.map((p) => `unknown field "${fieldPath(p.path)}"`).join(", ")}`,
      );
      for (const p of unknown) dropField(doc, p.path);
      continue;
    }
    const lines = problems.filter((p) => !unknown.includes(p)).map((p) => `${file}: ${fieldPath(p.path)}: ${p.message}`);
    if (hardFail) throw invalid(lines[0] + (lines.length > 1 ? ` (and ${lines.length - 1} more)` : ""));
    warnings.push(...lines.map((l) => `${l} (ignored: configHardFail is false)`));
    for (const p of problems) dropField(doc, p.path);
  }
  throw invalid(`${file}: configuration does not validate`);
}

export async function readKubeProxyConfig(file: string): Promise<LoadedConfig> {
  return parseKubeProxyConfig(file, await readTextFile(file, "config file"));
}

const secs = (d: string) => parseGoDuration(d) ?? 0;

/** The typed Config a kube-proxy document gives, on top of `base` (kpng-only fields are kept). */
export function configFromKubeProxy(doc: KubeProxyConfig, base: Config = defaultConfig()): Config {
  const cfg = structuredClone(base);
  const mode = backendOfMode(doc.mode);
  cfg.kubeProxy = structuredClone(doc);
  cfg.mode = mode;
  if (doc.hostnameOverride) cfg.nodeName = doc.hostnameOverride.toLowerCase();
  if (doc.nodeIPOverride.length) cfg.nodeIPs = [...doc.nodeIPOverride];
  cfg.nodePortAddresses = [...doc.nodePortAddresses];
  cfg.clusterCIDRs = [...doc.detectLocal.clusterCIDRs];
  cfg.localDetect = localDetectOf(doc);
  if (!cfg.localDetect) delete cfg.localDetect;
  cfg.masqueradeAll = doc.linux.masqueradeAll;
  cfg.masqueradeBit =
    mode === "ipvs" ? doc.ipvs.masqueradeBit : mode === "iptables" ? doc.iptables.masqueradeBit : doc.nftables.masqueradeBit;
  cfg.syncPeriodSeconds = secs(doc.syncPeriod);
  cfg.minSyncPeriodSeconds = secs(doc.minSyncPeriod);
  cfg.ipvs = {
    scheduler: doc.ipvs.scheduler || "rr",
    syncPeriodSeconds: cfg.syncPeriodSeconds,
    minSyncPeriodSeconds: cfg.minSyncPeriodSeconds,
    excludeCIDRs: [...doc.ipvs.excludeCIDRs],
    strictARP: doc.ipvs.strictARP,
    tcpTimeoutSeconds: secs(doc.ipvs.tcpTimeout),
    tcpFinTimeoutSeconds: secs(doc.ipvs.tcpFinTimeout),
    udpTimeoutSeconds: secs(doc.ipvs.udpTimeout),
  };
  cfg.iptables = { localhostNodePorts: doc.iptables.localhostNodePorts };
  cfg.logging = { format: doc.logging.format === "json" ? "json" : "text", verbosity: doc.logging.verbosity ?? 0 };
  cfg.winkernel = { sourceVip: doc.winkernel.sourceVip, networkName: doc.winkernel.networkName, enableDSR: doc.winkernel.enableDSR };
  cfg.conntrack = { ...cfg.conntrack, udpTimeoutSeconds: secs(doc.linux.conntrack.udpTimeout) };
  cfg.healthzBindAddress = doc.healthzBindAddress;
  cfg.metricsBindAddress = doc.metricsBindAddress;
  cfg.kubeconfig = doc.clientConnection.kubeconfig;
  return cfg;
}

/** kube-proxy writes its configuration with sorted keys (JSON -> YAML); so do we. v1alpha2 unless `apiVersion` says v1alpha1. */
export function formatKubeProxyConfig(doc: KubeProxyConfig, apiVersion: string = V1ALPHA2): string {
  // sortMapEntries sorts nested mappings too.
  return stringify(apiVersion === V1ALPHA1 ? toV1alpha1(doc) : doc, { sortMapEntries: true, lineWidth: 0, indentSeq: false });
}

export async function writeKubeProxyConfig(file: string, doc: KubeProxyConfig, apiVersion: string = V1ALPHA1): Promise<void> {
  try {
    await writeFile(file, formatKubeProxyConfig(doc, apiVersion));
  } catch (err) {
    throw invalid(`flag --write-config-to: cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
  }
}
