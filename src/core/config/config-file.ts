// `--config FILE`: a KubeProxyConfiguration (v1alpha1 or v1alpha2) read,
// validated, converted to the v1alpha2 layout and turned into kpng's Config;
// `--write-config-to FILE`: the effective document written back as v1alpha2
// (so `--config old.yaml --write-config-to new.yaml` migrates a file).
//
// Every problem is one line naming the file and the field. With
// `configHardFail: false` (v1alpha2 only) problems are warnings instead: the
// offending field is dropped (its default applies) and the rest loads.

import { writeFile } from "node:fs/promises";
import * as v from "valibot";
import { parseDocument, stringify } from "yaml";
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
} from "./kube-proxy-config.ts";
import { fieldPath, issueKeys, issueProblem } from "../issues.ts";
import { readTextFile } from "../read-text.ts";

export interface LoadedConfig {
  doc: KubeProxyConfig;
  /** one line each: problems ignored under configHardFail: false, and settings kpng does not act on */
  warnings: string[];
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

/** Parses and validates file contents; throws a one-line KpngError naming the file and field. */
export function parseKubeProxyConfig(file: string, text: string): LoadedConfig {
  const parsed = parseDocument(text, { uniqueKeys: true });
  const err = parsed.errors[0];
  if (err) throw invalid(`${file}: not valid YAML or JSON: ${err.message.split("\n")[0]}`);
  const raw = parsed.toJS() as unknown;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw invalid(`${file}: not a KubeProxyConfiguration mapping`);
  const doc = raw as Record<string, unknown>;
  if (doc.apiVersion !== V1ALPHA1 && doc.apiVersion !== V1ALPHA2) {
    throw invalid(`${file}: apiVersion: ${JSON.stringify(doc.apiVersion ?? null)} is not supported (use ${V1ALPHA1} or ${V1ALPHA2})`);
  }
  // Only v1alpha2 has the switch; a non-boolean value cannot switch anything off.
  const hardFail = !(doc.apiVersion === V1ALPHA2 && doc.configHardFail === false);
  const warnings: string[] = [];
  // Each round drops the fields that failed; a field's default is always valid, so this ends.
  for (let round = 0; round < 50; round++) {
    const { problems, doc: out } = problemsOf(doc);
    if (out) return { doc: out, warnings: [...warnings, ...semanticWarnings(file, out)] };
    const lines = problems.map((p) => `${file}: ${fieldPath(p.path)}: ${p.message}`);
    if (hardFail) throw invalid(lines[0] + (lines.length > 1 ? ` (and ${lines.length - 1} more)` : ""));
    warnings.push(...lines.map((l) => `${l} (ignored: configHardFail is false)`));
    for (const p of problems) dropField(doc, p.path);
  }
  throw invalid(`${file}: configuration does not validate`);
}

/** Settings that are valid kube-proxy configuration but mean nothing, or something else, to kpng. */
function semanticWarnings(file: string, doc: KubeProxyConfig): string[] {
  const out: string[] = [];
  if (doc.detectLocalMode !== "" && doc.detectLocalMode !== "ClusterCIDR") {
    out.push(`${file}: detectLocalMode: ${doc.detectLocalMode} is not supported by kpng; pod traffic is recognised by detectLocal.clusterCIDRs`);
  }
  if (doc.windows.runAsService) out.push(`${file}: windows.runAsService: not supported by kpng, ignored`);
  return out;
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
  cfg.masqueradeAll = doc.linux.masqueradeAll;
  cfg.masqueradeBit = mode === "ipvs" ? doc.ipvs.masqueradeBit : mode === "iptables" ? doc.iptables.masqueradeBit : doc.nftables.masqueradeBit;
  cfg.syncPeriodSeconds = secs(doc.syncPeriod);
  cfg.minSyncPeriodSeconds = secs(doc.minSyncPeriod);
  cfg.ipvs = { scheduler: doc.ipvs.scheduler || "rr", syncPeriodSeconds: cfg.syncPeriodSeconds, minSyncPeriodSeconds: cfg.minSyncPeriodSeconds };
  cfg.winkernel = { sourceVip: doc.winkernel.sourceVip, networkName: doc.winkernel.networkName, enableDSR: doc.winkernel.enableDSR };
  cfg.conntrack = { ...cfg.conntrack, udpTimeoutSeconds: secs(doc.linux.conntrack.udpTimeout) };
  cfg.healthzBindAddress = doc.healthzBindAddress;
  cfg.metricsBindAddress = doc.metricsBindAddress;
  cfg.kubeconfig = doc.clientConnection.kubeconfig;
  return cfg;
}

/** kube-proxy writes its configuration with sorted keys (JSON -> YAML); so do we. */
export function formatKubeProxyConfig(doc: KubeProxyConfig): string {
  // sortMapEntries sorts nested mappings too.
  return stringify(doc, { sortMapEntries: true, lineWidth: 0, indentSeq: false });
}

export async function writeKubeProxyConfig(file: string, doc: KubeProxyConfig): Promise<void> {
  try {
    await writeFile(file, formatKubeProxyConfig(doc));
  } catch (err) {
    throw invalid(`flag --write-config-to: cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
  }
}
