#!/usr/bin/env bun
// kpng's command line: flags, subcommands and wiring. Only this file exits
// the process; everything below it throws KpngError.

import { defineCommand, type CommandDef } from "citty";
import pkg from "../package.json" with { type: "json" };
import { Brain } from "./core/brain/brain.ts";
import { formatUsage, parseArgv, type FlagDefs } from "./core/config/argv.ts";
import { defaultConfig, type Config } from "./core/config/config.ts";
import { configFromKubeProxy, readKubeProxyConfig, writeKubeProxyConfig } from "./core/config/config-file.ts";
import { modeOfBackend, v1alpha1Losses, V1ALPHA1, V1ALPHA2 } from "./core/config/kube-proxy-config.ts";
import { fieldOfFlag, kubeProxyArgs, logArgs, noEffectFlags } from "./core/config/kube-proxy-flags.ts";
import { fieldWarnings } from "./core/config/config-fields.ts";
import { errorMessage, invalid, isInvalidArgument, KpngError } from "./core/errors.ts";
import { apiClientArgs, backendNames, configFromCLIDefaults, configFromFlags, givenFlags, listenArgs, modeSource, proxyArgs, repeated, sourceArgs } from "./core/config/flags.ts";
import { configureLogging, createLogger, jsonLine, logFormat } from "./core/log.ts";
import { applyConntrack, detectNumCPU, planConntrack } from "./core/node/conntrack-sysctl.ts";
import { formatLocalState } from "./core/brain/output.ts";
import { applyOOMScoreAdj, startProxyServers } from "./core/node/proxy-servers.ts";
import { startSource, waitForNodeIPs } from "./core/sources/index.ts";
import type { GlobalSourceStats } from "./core/sources/global.ts";
import type { Backend, BackendContext } from "./plugins/backend.ts";
import { feedBackend } from "./plugins/feed.ts";
import { loadBackend } from "./plugins/loader.ts";
import { releaseExecutablePages } from "./core/release-pages.ts";
// The API server and client (Connect, HTTP/2) load only when a command uses them: a
// node proxy without --listen never pays their start-up time and memory.
import { DEFAULT_LISTEN, DEFAULT_UNIX_SOCKET as DEFAULT_API } from "./core/api/server/address.ts";
import type { ApiServer } from "./core/api/server/index.ts";
import { apiClientSecurity, serveSecurity, type ServeSecurity } from "./core/api/tls/flags.ts";

const log = createLogger("kpng");

type Args = Record<string, string | number | boolean | string[] | undefined>;

/**
 * The --config file (if any; else kube-proxy's own defaults), then flags over
 * it -> Config. Logging is configured from the result before anything is
 * logged; flags kpng accepts without effect are named in one WARN line.
 */
async function loadConfig(args: Args, rawArgs: string[], defs: FlagDefs): Promise<Config & { configApiVersion: string }> {
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
  // kube-proxy's 1 s default minimum only where an operator asked for a minimum: else syncs are paced by their cost (pacing.ts).
  if (!minSyncPeriodSet && !MIN_SYNC_FLAGS.some((f) => given.includes(f))) cfg.minSyncPeriodSeconds = cfg.ipvs.minSyncPeriodSeconds = 0;
  const ignored = noEffectFlags(given, defs);
  if (ignored.length) log.warn(`kube-proxy flags accepted with no effect in kpng: ${ignored.join(", ")}`);
  // A value a flag gave that kpng cannot honour (--detect-local-mode=NodeCIDR), unless the file already said so.
  const fromFlags = given.filter((f) => !defs[f]?.noEffect && fieldOfFlag[f]).map((f) => `${fieldOfFlag[f].field}:`);
  for (const w of fieldWarnings(cfg.kubeProxy)) {
    if (fromFlags.some((f) => w.startsWith(f)) && !warnings.some((fw) => fw.endsWith(`: ${w}`))) log.warn(`${w} (set by a flag)`);
  }
  return { ...cfg, configApiVersion };
}

const MIN_SYNC_FLAGS = ["min-sync-period", "iptables-min-sync-period", "ipvs-min-sync-period"];

/** `--write-config-version`, else the --config file's own apiVersion, else v1alpha1 (what every kube-proxy reads). */
function writeConfigVersion(args: Args, configApiVersion: string): string {
  const asked = args["write-config-version"];
  if (asked === undefined) return configApiVersion;
  const full = String(asked).includes("/") ? String(asked) : `kubeproxy.config.k8s.io/${asked}`;
  if (full !== V1ALPHA1 && full !== V1ALPHA2) throw invalid(`flag --write-config-version: "${asked}" must be v1alpha1 or v1alpha2`);
  return full;
}

/** Built-in backends that program netfilter and so rely on conntrack: kube-proxy sets its sysctls for each of its Linux modes. */
const CONNTRACK_BACKENDS = new Set(["nft", "iptables", "ipvs", "ebpf"]);

/** kube-proxy's conntrack sysctls (not in a dry run: a dry run does not own the node). */
async function setConntrack(cfg: Config, backends: readonly string[]): Promise<void> {
  if (process.platform !== "linux" || !backends.some((b) => CONNTRACK_BACKENDS.has(b))) return;
  const plan = planConntrack(cfg.kubeProxy.linux.conntrack, await detectNumCPU());
  if (cfg.dryRun) return log.v(2).info("conntrack sysctls not set (dry run)", { nfConntrackMax: plan.max, set: plan.set.map((s) => `${s.key}=${s.value}`).join(",") });
  await applyConntrack(plan, { log });
}

const newBrain = (cfg: Config) => new Brain({ serviceProxyName: cfg.serviceProxyName, nodeIPOverride: { node: cfg.nodeName, ips: cfg.nodeIPs } });

/** Where cluster objects come from: --input, --api (node agent) or the API server. */
const sourceOptions = (args: Args, rawArgs: string[]) => {
  const api = repeated(rawArgs, "api");
  return {
    input: args.input as string | undefined,
    kubeconfig: args.kubeconfig as string | undefined,
    master: args.master as string | undefined,
    api,
    security: api.length ? apiClientSecurity(args, api, log) : undefined,
  };
};

async function startBrain(args: Args, rawArgs: string[], cfg: Config, opts: { allNodes?: boolean } = {}) {
  const brain = newBrain(cfg);
  const source = await startSource({ ...sourceOptions(args, rawArgs), ...opts }, cfg, brain, log);
  return { brain, source };
}

/** `--cleanup`: every backend removes what it ever created; then every mode's rules go, kpng's and kube-proxy's. */
async function cleanupBackends(backends: Backend[], ctx: BackendContext): Promise<void> {
  for (const b of backends) await b.cleanup?.(ctx);
  const { cleanupEveryMode } = await import("./plugins/leftovers/index.ts");
  const { failures } = await cleanupEveryMode({ log: log.child("cleanup"), dryRun: ctx.config.dryRun, out: ctx.out });
  if (failures.length) throw new KpngError("internal", `cleanup: ${failures.length} removal(s) failed, first: ${failures[0]}`);
  log.info("cleanup done", { backends: backends.map((b) => b.name).join(",") });
}

/** Once kpng's own rules are in (every backend synced once), kube-proxy's go: README "Migrating from kube-proxy". */
async function removeKubeProxyRules(names: string[]): Promise<void> {
  if (!names.some((n) => n === "nft" || n === "iptables" || n === "ipvs")) return;
  const { migrateFromKubeProxy } = await import("./plugins/leftovers/index.ts");
  await migrateFromKubeProxy({ log: log.child("migrate"), backends: names }).catch((err: unknown) => log.warn("cannot remove kube-proxy's rules", { err: errorMessage(err) }));
}

async function loadBackends(rawArgs: string[], ctx: BackendContext): Promise<Backend[]> {
  // --backend/--proxy-mode (kube-proxy's mode names too), else the config file's mode, else nft.
  const specs: Array<{ builtin?: string; plugin?: string }> = [
    ...backendNames(rawArgs, ctx.config).map((builtin) => ({ builtin })),
    ...repeated(rawArgs, "plugin").map((plugin) => ({ plugin })),
  ];
  const backends: Backend[] = [];
  for (const spec of specs) backends.push(await loadBackend(spec, ctx));
  return backends;
}

const runArgs = { ...sourceArgs, ...apiClientArgs, ...proxyArgs, ...listenArgs, ...kubeProxyArgs, ...logArgs } as const satisfies FlagDefs;

const runCommand = defineCommand({
  meta: { name: "kpng", description: "Kubernetes service proxy: the brain plus in-process backends (kube-proxy's flags and configuration are accepted)" },
  args: runArgs,
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, runArgs);
    if (typeof args["write-config-to"] === "string") {
      const apiVersion = writeConfigVersion(args, cfg.configApiVersion);
      const lost = apiVersion === V1ALPHA1 ? v1alpha1Losses(cfg.kubeProxy) : [];
      if (lost.length) log.warn(`written as ${V1ALPHA1}, which has no place for: ${lost.join(", ")} (--write-config-version v1alpha2 keeps them)`);
      await writeKubeProxyConfig(args["write-config-to"], cfg.kubeProxy, apiVersion);
      log.info("configuration written", { file: args["write-config-to"], apiVersion });
      return;
    }
    const names = backendNames(rawArgs, cfg);
    if (args["init-only"]) return setConntrack(cfg, names);
    const ctx: BackendContext = { config: cfg, log, out: (t) => process.stdout.write(t) };
    const backends = await loadBackends(rawArgs, ctx);
    if (args.cleanup) return cleanupBackends(backends, ctx);
    const listen = repeated(rawArgs, "listen");
    const sources = sourceOptions(args, rawArgs);
    const security = serveSecurity(args, listen, sources);
    const brain = newBrain(cfg);
    // Handlers go in first: a SIGTERM during start-up must still clean up (the API socket above all).
    const stopped = args.once ? undefined : waitForSignal();
    // Health and metrics answer from the start, also while the API server is still unreachable.
    const servers = args.once ? undefined : startProxyServers({ cfg, brain, log: log.child("serve"), backends: backends.map((b) => b.name) });
    ctx.metrics = servers?.metrics;
    if (!args.once) applyOOMScoreAdj(cfg, log);
    // Backends get ready while the lists run (nft loads its skeleton with --check: ~40 ms
    // that used to follow the first compute); one that cannot work stops kpng at once.
    // Then the conntrack sysctls, as kube-proxy sets them before its proxier starts.
    const ready = Promise.all(backends.map((b) => b.setup?.(ctx))).then(() => setConntrack(cfg, names));
    const unready = ready.then(() => new Promise<never>(() => {}));
    // The first list may wait on an unreachable API server for as long as it is down: a SIGTERM meanwhile still stops kpng.
    const onGlobalStats = (stats: GlobalSourceStats) => servers?.metrics.followGlobal(stats);
    const source = await untilStopped(Promise.race([startSource({ ...sources, onGlobalStats, restClient: servers?.metrics.restClient }, cfg, brain, log), unready]), stopped);
    if (!source) return servers?.close();
    // Once the source is up: bad input (a broken --input file) stays a single line on stderr.
    log.info("proxy mode", { mode: names.map((n) => modeOfBackend(n) || n).join(","), from: modeSource(rawArgs, cfg) });
    servers?.setSource(source);
    const api = listen.length ? await serveApi(brain, cfg, listen, security, args) : undefined;
    if (api) servers?.metrics.followApi(api);
    const view = brain.view(cfg.nodeName);
    // Node ports and health checks need the node's IPs: a cluster source may
    // register the Node after we start, so wait for it (bounded); a file is
    // the whole cluster, so a Node missing from it is only worth a warning.
    // Either way the IPs follow the Node later (see the subscription below).
    if (args.input === undefined && !cfg.nodeIPs.length) await Promise.race([waitForNodeIPs(view, { log }), ...(stopped ? [stopped] : [])]);
    else if (view.state && !view.state.nodeIPs.length) log.warn("the input file has no addresses for this Node: node ports answer nowhere until it does (or set --node-ip)", { node: cfg.nodeName, file: args.input });
    await ready;
    // kube-proxy also records its IPVS deprecation as a Warning event on the Node (cluster sources only); not awaited: start-up never waits on it.
    const nodeWarnings = args.input === undefined && args.api === undefined ? backends.flatMap((b) => (b.nodeWarning ? [b.nodeWarning] : [])) : [];
    const warned = nodeWarnings.length
      ? import("./core/node/events.ts").then((e) => Promise.all(nodeWarnings.map((w) => e.recordStartWarning({ kubeconfig: args.kubeconfig as string | undefined, master: args.master as string | undefined, config: cfg, log: log.child("events"), restClient: servers?.metrics.restClient }, w))))
      : undefined;
    let pendingOnce = backends.length;
    const done = Promise.withResolvers<void>();
    let migrated: Promise<void> | undefined;
    const feeds = backends.map((b) => {
      let first = true;
      return feedBackend(b, {
        log,
        onSynced: (state, seconds, change) => {
          servers?.synced(b.name, state, seconds, change);
          const startedUp = first && --pendingOnce === 0;
          if (startedUp) done.resolve();
          if (startedUp && !cfg.dryRun) migrated = removeKubeProxyRules(backends.map((b) => b.name));
          first = false;
          releaseFreedMemory(startedUp);
          if (startedUp) releaseStartupPages(migrated);
        },
        onError: (err) => servers?.failed(b.name, err),
        onRulesLost: (reason) => servers?.rulesLost(b.name, reason),
      });
    });
    let nodeIPs: readonly string[] | undefined;
    view.subscribe((rev) => {
      if (rev.change === null) log.info("node-local state computed", { rev: rev.state.rev, services: rev.state.services.size });
      if (rev.state.nodeIPs !== nodeIPs) {
        if (nodeIPs || rev.state.nodeIPs?.length) log.info("node IPs", { node: cfg.nodeName, ips: rev.state.nodeIPs?.join(",") ?? "" });
        nodeIPs = rev.state.nodeIPs;
      }
      servers?.queued(rev);
      for (const feed of feeds) feed.push(rev);
    });
    log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), dryRun: cfg.dryRun });
    if (args.once) {
      await done.promise;
      await migrated;
      await warned;
      await api?.close();
      source.close();
      for (const b of backends) await b.close?.();
      return;
    }
    await stopped;
    servers?.close();
    await api?.close();
    source.close();
    for (const b of backends) await b.close?.();
  },
});

let release: { timer: ReturnType<typeof setTimeout>; collect: boolean } | undefined;

/**
 * Once the syncs settle (none for RELEASE_IDLE_MS), hand the memory they
 * freed back to the system. The runtime does it by itself, but over seconds:
 * until then RSS sits above the steady state (~2-3 MB at 1,000 services after
 * a burst of changes; Bun.shrink costs well under a millisecond). Start-up
 * (lists, the first state, the first full transaction) leaves the heap at its
 * high-water mark: once every backend holds its first sync, collect it first,
 * at once (off the critical path: the rules are in).
 */
function releaseFreedMemory(collect: boolean) {
  collect ||= release?.collect ?? false;
  clearTimeout(release?.timer);
  const timer = setTimeout(
    () => {
      release = undefined;
      if (collect) Bun.gc(true);
      Bun.shrink();
    },
    collect ? 0 : RELEASE_IDLE_MS,
  );
  timer.unref();
  release = { timer, collect };
}
const RELEASE_IDLE_MS = 100;

/**
 * The executable's pages that only start-up used leave the resident set
 * (core/release-pages.ts) twice: at once when every backend holds its first
 * sync (after the collection above: loading touched most of them), and once
 * what follows that sync has run as well: kube-proxy's rules removed, the
 * backends' watches proven, the API watches' first events. Never again: from
 * then on, a page dropped would be one the next change faults back in.
 */
function releaseStartupPages(after: Promise<void> | undefined) {
  const release = (when: string) => log.v(2).info("released the executable's start-up pages", { when, residentKB: releaseExecutablePages() });
  setTimeout(() => release("first sync"), 0).unref();
  const settled = new Promise<void>((resolve) => setTimeout(resolve, STARTUP_SETTLE_MS).unref());
  void Promise.all([after, settled]).then(() => release("settled"));
}
const STARTUP_SETTLE_MS = 1000;

async function serveApi(brain: Brain, cfg: Config, listen: string[], security: ServeSecurity, args: Args): Promise<ApiServer> {
  const { startApiServer } = await import("./core/api/server/index.ts");
  const tokens = security.tokenUsers.length ? await tokenReviewer(args, cfg, security.tokenUsers) : undefined;
  return startApiServer({ brain, listen, listenAny: security.listenAny, tls: security.tls, auth: { tokens }, defaultNodeName: cfg.nodeName, log: log.child("api") });
}

/** `kpng serve --metrics-bind-address`: the brain's own counters (API-server source, refused clients, dropped streams). */
async function serveBrainMetrics(brain: Brain, cfg: Config, source: Awaited<ReturnType<typeof startSource>>, api: ApiServer) {
  const { ProxyMetrics, startMetricsServer } = await import("./core/node/metrics.ts");
  const metrics = new ProxyMetrics({ brain, backends: [], source: () => source.stats });
  metrics.followApi(api);
  return startMetricsServer({ address: cfg.metricsBindAddress, metrics, proxyMode: "", config: cfg.kubeProxy, log: log.child("metrics") });
}

/** `--listen-token-review`: the brain asks its own API server about agents' tokens. */
async function tokenReviewer(args: Args, cfg: Config, users: string[]) {
  const [{ tokenReviewer }, { kubeRequest }, { loadKubeConfig }, { Agent }] = await Promise.all([
    import("./core/api/server/token-review.ts"),
    import("./core/sources/kube-http.ts"),
    import("./core/sources/kubeconfig.ts"),
    import("node:https"),
  ]);
  const access = loadKubeConfig({ kubeconfig: (args.kubeconfig as string | undefined) || cfg.kubeconfig || undefined, master: args.master as string | undefined });
  return tokenReviewer({ request: kubeRequest(access, new Agent({ keepAlive: true })), users });
}

const serveArgs = {
  ...sourceArgs,
  ...listenArgs,
  "metrics-bind-address": { type: "string", description: "address:port for /metrics (default: none; a brain beside a node's kpng would take its port)" },
  ...logArgs,
} as const satisfies FlagDefs;

const serveCommand = defineCommand({
  meta: { name: "serve", description: "the brain only: serve node-local states on the API (default unix:///run/kpng.sock and tcp://127.0.0.1:12090)" },
  args: serveArgs,
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, serveArgs);
    const given = repeated(rawArgs, "listen");
    const listen = given.length ? given : DEFAULT_LISTEN;
    const security = serveSecurity(args, listen, sourceOptions(args, rawArgs));
    // Before serving: a SIGTERM right after the socket appears must still close it.
    const stopped = waitForSignal();
    // Agents on every node follow this brain: it watches every Node, not only its own.
    const started = await untilStopped(startBrain(args, rawArgs, cfg, { allNodes: true }), stopped);
    if (!started) return;
    const { brain, source } = started;
    const api = await serveApi(brain, cfg, listen, security, args);
    const metrics = typeof args["metrics-bind-address"] === "string" ? await serveBrainMetrics(brain, cfg, source, api) : undefined;
    await stopped;
    metrics?.close();
    await api.close();
    source.close();
  },
});

const backendArgs = {
  ...proxyArgs,
  ...apiClientArgs,
  "node-name": sourceArgs["node-name"],
  config: sourceArgs.config,
  api: { type: "string", description: `the brain's API: unix:///path or tcp://HOST:PORT (default ${DEFAULT_API})` },
  protocol: { type: "string", description: "watch (diff stream, default) or next (full-state long poll)" },
  ...logArgs,
} as const satisfies FlagDefs;

const backendCommand = defineCommand({
  meta: { name: "backend", description: "backends only: follow a brain over the API (a sidecar)" },
  args: backendArgs,
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, backendArgs);
    if (args.protocol !== undefined && args.protocol !== "watch" && args.protocol !== "next") throw new KpngError("invalid_argument", `flag --protocol: "${args.protocol}" must be watch or next`);
    const security = apiClientSecurity(args, [args.api ?? DEFAULT_API], log);
    const ctx: BackendContext = { config: cfg, log, out: (t) => process.stdout.write(t) };
    const backends = await loadBackends(rawArgs, ctx);
    if (args.cleanup) return cleanupBackends(backends, ctx);
    for (const b of backends) await b.setup?.(ctx);
    // A sidecar programs the node's rules too: the same conntrack sysctls (from its --config).
    await setConntrack(cfg, backendNames(rawArgs, cfg));
    const stop = new AbortController();
    void waitForSignal().then(() => stop.abort());
    log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), api: args.api ?? DEFAULT_API });
    const { runSidecar } = await import("./plugins/sidecar.ts");
    await runSidecar({ backends, api: args.api, security, nodeName: cfg.nodeName, protocol: args.protocol, once: args.once === true, signal: stop.signal, log: log.child("client") });
    for (const b of backends) await b.close?.();
  },
});

const localArgs = { ...sourceArgs, ...apiClientArgs, output: { type: "string", alias: ["o"], default: "json", description: "json or yaml" }, ...logArgs } as const satisfies FlagDefs;

const localCommand = defineCommand({
  meta: { name: "local", description: "print the node-local state and exit" },
  args: localArgs,
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, localArgs);
    const output = args.output ?? "json";
    if (output !== "json" && output !== "yaml") throw new KpngError("invalid_argument", `flag --output: "${output}" must be json or yaml`);
    const { brain, source } = await startBrain(args, rawArgs, cfg);
    const state = await brain.view(cfg.nodeName).next(0);
    source.close();
    process.stdout.write(formatLocalState(state, output));
  },
});

/** `work`'s value, or undefined if `stopped` (a signal) comes first; `work` then goes on until the process exits. */
async function untilStopped<T>(work: Promise<T>, stopped: Promise<void> | undefined): Promise<T | undefined> {
  return stopped ? Promise.race([work, stopped.then(() => undefined)]) : work;
}

function waitForSignal(): Promise<void> {
  return new Promise((resolve) => {
    const stop = (sig: string) => {
      log.info("shutting down", { signal: sig });
      resolve();
    };
    process.once("SIGINT", () => stop("SIGINT"));
    process.once("SIGTERM", () => stop("SIGTERM"));
  });
}

const subCommands: Record<string, CommandDef<any>> = { local: localCommand, serve: serveCommand, backend: backendCommand };

/** Bad input -> one line and exit 2; anything else -> exit 1. */
function fail(err: unknown): never {
  // With --logging-format=json every stderr line stays JSON (component-base's cli.Run logs "command failed").
  if (logFormat() === "json") process.stderr.write(jsonLine(performance.timeOrigin + performance.now(), "error", 0, "kpng", "command failed", { error: errorMessage(err) }) + "\n");
  else process.stderr.write(`kpng: ${errorMessage(err)}\n`);
  process.exit(isInvalidArgument(err) ? 2 : 1);
}

const globalArgs = {
  help: { type: "boolean", alias: ["h"], description: "print this help and exit" },
  version: { type: "string", noOptDefVal: "true", valueHint: "version[=raw]", description: "print the version and exit" },
} as const satisfies FlagDefs;

const USAGE = `kpng [flags]                               the brain plus in-process backends (a kube-proxy)
kpng --api ADDR --node-name N [flags]      node agent: follows a central brain
kpng serve   [source flags] [--listen ADDR]...
kpng backend --api ADDR --backend NAME|--plugin PATH
kpng local   [source flags] --node-name NAME [-o json|yaml]`;

function usage(cmd: CommandDef<any>, name: string): string {
  const meta = cmd.meta as { description: string };
  const commands = Object.entries(subCommands).map(([n, c]) => ({ name: n, description: (c.meta as { description: string }).description }));
  return formatUsage({ usage: name ? `kpng ${name} [flags]` : USAGE, description: meta.description, commands: name ? [] : commands, defs: { ...(cmd.args as FlagDefs), ...globalArgs } });
}

/** `--version`: kpng's version (package.json), as kube-proxy prints its own; `--version=raw` as a JSON object. */
function versionText(v: string): string {
  const version = `v${pkg.version}`;
  if (v === "raw") return JSON.stringify({ gitVersion: version, platform: `${process.platform}/${process.arch}`, runtime: `bun ${Bun.version}` }, null, 2);
  return `kpng ${version}`;
}

// citty would also run the parent's `run` after a subcommand, and its parser
// is not pflag's, so parse (argv.ts) and dispatch here.
const argv = process.argv.slice(2);
const subName = subCommands[argv[0] ?? ""] ? argv[0] : "";
const cmd = subName ? subCommands[subName] : runCommand;
process.on("unhandledRejection", fail);
try {
  const parsed = parseArgv(subName ? argv.slice(1) : argv, { ...(cmd.args as FlagDefs), ...globalArgs });
  const version = parsed.args.version;
  if (parsed.args.help) process.stdout.write(usage(cmd, subName));
  // verflag: --version / --version=raw print and exit; --version=vX.Y.Z only sets the reported version (no effect here).
  else if (version === "true" || version === "raw") process.stdout.write(versionText(version) + "\n");
  else await cmd.run!({ args: parsed.args as never, rawArgs: parsed.rawArgs, cmd, data: undefined });
} catch (err) {
  fail(err);
}
process.exit(0);
