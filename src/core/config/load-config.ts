// What every command does first: the --config file (if any; else
// kube-proxy's own defaults), then the flags over it -> one Config. Logging is
// configured from the result before anything is logged. Also
// `--write-config-to`: the same Config written back as a kube-proxy file.

import type { FlagDefs } from "./argv.ts";
import { defaultConfig, type Config } from "./config.ts";
import { fieldWarnings } from "./config-fields.ts";
import { configFromKubeProxy, readKubeProxyConfig, writeKubeProxyConfig } from "./config-file.ts";
import { configFromCLIDefaults, configFromFlags, givenFlags, type Args } from "./flags.ts";
import { v1alpha1Losses, V1ALPHA1, V1ALPHA2, type KubeProxyConfig } from "./kube-proxy-config.ts";
import { fieldOfFlag, noEffectFlags } from "./kube-proxy-flags.ts";
import { invalid } from "../errors.ts";
import { configureLogging, type Logger } from "../log.ts";

export interface LoadConfigOptions {
  args: Args;
  rawArgs: string[];
  /** the command's flags (which of them have no effect in kpng) */
  defs: FlagDefs;
  log: Logger;
}

/** The Config, and the --config file's own apiVersion (v1alpha1 without a file): what --write-config-to writes by default. */
export type CommandConfig = Config & { configApiVersion: string };

/** Flags kube-proxy reads as a minimum interval between syncs. */
/**
 * Whether an operator asked for a minimum sync period, in the file or by a
 * flag that applies to the mode (as kube-proxy applies
 * `--iptables-min-sync-period` outside ipvs mode and `--ipvs-min-sync-period`
 * in it): only then does kube-proxy's 1 s default minimum hold; else syncs
 * are paced by their cost (pacing.ts).
 */
export const minSyncPeriodAsked = (given: readonly string[], inFile: boolean, ipvs: boolean): boolean =>
  inFile || given.includes("min-sync-period") || given.includes(ipvs ? "ipvs-min-sync-period" : "iptables-min-sync-period");

/**
 * A value a flag gave that kpng cannot honour (--detect-local-mode=NodeCIDR),
 * one line each, unless the file already said so (`fileWarnings`).
 */
export function flagFieldWarnings(opts: {
  given: readonly string[];
  defs: FlagDefs;
  doc: KubeProxyConfig;
  fileWarnings: readonly string[];
}): string[] {
  const fromFlags = opts.given.filter((f) => !opts.defs[f]?.noEffect && fieldOfFlag[f]).map((f) => `${fieldOfFlag[f].field}:`);
  return fieldWarnings(opts.doc)
    .filter((w) => fromFlags.some((f) => w.startsWith(f)) && !opts.fileWarnings.some((fw) => fw.endsWith(`: ${w}`)))
    .map((w) => `${w} (set by a flag)`);
}

/**
 * A command's Config. Logged once logging is configured: the file's
 * warnings, the flags kpng accepts without effect (one WARN line), and the
 * values flags set that kpng cannot honour.
 */
export async function loadConfig(opts: LoadConfigOptions): Promise<CommandConfig> {
  const { args, rawArgs, defs, log } = opts;
  let base = configFromCLIDefaults();
  let warnings: string[] = [];
  let configApiVersion: string = V1ALPHA1;
  let minSyncPeriodSet = false;
  if (typeof args.config === "string") {
    const loaded = await readKubeProxyConfig(args.config);
    warnings = loaded.warnings;
    configApiVersion = loaded.apiVersion;
    minSyncPeriodSet = loaded.minSyncPeriodSet;
    base = configFromKubeProxy(loaded.doc, defaultConfig());
  }
  const cfg = configFromFlags(args, rawArgs, base);
  configureLogging(cfg.logging ?? {});
  for (const w of warnings) log.warn(w);
  const given = givenFlags(rawArgs);
  if (!minSyncPeriodAsked(given, minSyncPeriodSet, cfg.mode === "ipvs")) cfg.minSyncPeriodSeconds = cfg.ipvs.minSyncPeriodSeconds = 0;
  const ignored = noEffectFlags(given, defs);
  if (ignored.length) log.warn(`kube-proxy flags accepted with no effect in kpng: ${ignored.join(", ")}`);
  for (const w of flagFieldWarnings({ given, defs, doc: cfg.kubeProxy, fileWarnings: warnings })) log.warn(w);
  return { ...cfg, configApiVersion };
}

/** `--write-config-version`, else the --config file's own apiVersion, else v1alpha1 (what every kube-proxy reads). */
export function writeConfigVersion(asked: Args[string], configApiVersion: string): string {
  if (asked === undefined) return configApiVersion;
  const full = String(asked).includes("/") ? String(asked) : `kubeproxy.config.k8s.io/${asked}`;
  if (full !== V1ALPHA1 && full !== V1ALPHA2) throw invalid(`flag --write-config-version: "${asked}" must be v1alpha1 or v1alpha2`);
  return full;
}

/** `--write-config-to FILE`: the Config as a kube-proxy file, with a warning for what v1alpha1 cannot hold. */
export async function writeConfigFile(opts: { file: string; cfg: CommandConfig; version: Args[string]; log: Logger }): Promise<void> {
  const { file, cfg, log } = opts;
  const apiVersion = writeConfigVersion(opts.version, cfg.configApiVersion);
  const lost = apiVersion === V1ALPHA1 ? v1alpha1Losses(cfg.kubeProxy) : [];
  if (lost.length)
    log.warn(`written as ${V1ALPHA1}, which has no place for: ${lost.join(", ")} (--write-config-version v1alpha2 keeps them)`);
  await writeKubeProxyConfig(file, cfg.kubeProxy, apiVersion);
  log.info("configuration written", { file, apiVersion });
}
