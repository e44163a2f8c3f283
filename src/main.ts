#!/usr/bin/env bun
// kpng's command line: flags, subcommands and wiring. Only this file exits
// the process; everything below it throws KpngError.

import { defineCommand, runCommand as runCommand_, showUsage, type ArgsDef, type CommandDef } from "citty";
import { Brain } from "./core/brain/brain.ts";
import { defaultConfig, type Config } from "./core/config/config.ts";
import { configFromKubeProxy, readKubeProxyConfig, writeKubeProxyConfig } from "./core/config/config-file.ts";
import { errorMessage, isInvalidArgument, KpngError } from "./core/errors.ts";
import { apiClientArgs, backendNames, checkUnknownFlags, configFromFlags, listenArgs, proxyArgs, repeated, sourceArgs } from "./core/config/flags.ts";
import { createLogger } from "./core/log.ts";
import { formatLocalState } from "./core/brain/output.ts";
import { applyOOMScoreAdj, startProxyServers } from "./core/node/proxy-servers.ts";
import { startSource, waitForNodeIPs } from "./core/sources/index.ts";
import type { GlobalSourceStats } from "./core/sources/global.ts";
import type { Backend, BackendContext } from "./plugins/backend.ts";
import { feedBackend } from "./plugins/feed.ts";
import { loadBackend } from "./plugins/loader.ts";
// The API server and client (Connect, HTTP/2) load only when a command uses them: a
// node proxy without --listen never pays their start-up time and memory.
import { DEFAULT_LISTEN, DEFAULT_UNIX_SOCKET as DEFAULT_API } from "./core/api/server/address.ts";
import type { ApiServer } from "./core/api/server/index.ts";
import { apiClientSecurity, serveSecurity, type ServeSecurity } from "./core/api/tls/flags.ts";

const log = createLogger("kpng");

type Args = Record<string, string | number | boolean | string[] | undefined>;

/** The --config file (if any), then flags over it -> Config; fails on unknown flags. */
async function loadConfig(args: Args, rawArgs: string[], defs: ArgsDef): Promise<Config> {
  checkUnknownFlags(rawArgs, defs);
  let base = defaultConfig();
  if (typeof args.config === "string") {
    const { doc, warnings } = await readKubeProxyConfig(args.config);
    for (const w of warnings) log.warn(w);
    base = configFromKubeProxy(doc, base);
  }
  return configFromFlags(args, rawArgs, base);
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

/** `--cleanup`: every backend removes what it ever created. */
async function cleanupBackends(backends: Backend[], ctx: BackendContext): Promise<void> {
  for (const b of backends) await b.cleanup?.(ctx);
  log.info("cleanup done", { backends: backends.map((b) => b.name).join(",") });
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

const runCommand = defineCommand({
  meta: { name: "kpng", description: "Kubernetes service proxy: the brain plus in-process backends" },
  args: { ...sourceArgs, ...apiClientArgs, ...proxyArgs, ...listenArgs },
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, { ...sourceArgs, ...apiClientArgs, ...proxyArgs, ...listenArgs });
    if (typeof args["write-config-to"] === "string") {
      await writeKubeProxyConfig(args["write-config-to"], cfg.kubeProxy);
      log.info("configuration written", { file: args["write-config-to"], apiVersion: cfg.kubeProxy.apiVersion });
      return;
    }
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
    if (!args.once) applyOOMScoreAdj(cfg, log);
    // Backends get ready while the lists run (nft loads its skeleton with --check: ~40 ms
    // that used to follow the first compute); one that cannot work stops kpng at once.
    const ready = Promise.all(backends.map((b) => b.setup?.(ctx)));
    const unready = ready.then(() => new Promise<never>(() => {}));
    // The first list may wait on an unreachable API server for as long as it is down: a SIGTERM meanwhile still stops kpng.
    const onGlobalStats = (stats: GlobalSourceStats) => servers?.metrics.followGlobal(stats);
    const source = await untilStopped(Promise.race([startSource({ ...sources, onGlobalStats }, cfg, brain, log), unready]), stopped);
    if (!source) return servers?.close();
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
    const warned = args.input === undefined && args.api === undefined && backendNames(rawArgs, cfg).includes("ipvs")
      ? import("./core/node/events.ts").then((e) => e.recordIpvsDeprecation({ kubeconfig: args.kubeconfig as string | undefined, master: args.master as string | undefined, config: cfg, log: log.child("events") }))
      : undefined;
    let pendingOnce = backends.length;
    const done = Promise.withResolvers<void>();
    const feeds = backends.map((b) => {
      let first = true;
      return feedBackend(b, {
        log,
        onSynced: (state, seconds, change) => {
          servers?.synced(b.name, state, seconds, change);
          const startedUp = first && --pendingOnce === 0;
          if (startedUp) done.resolve();
          first = false;
          releaseFreedMemory(startedUp);
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

const serveCommand = defineCommand({
  meta: { name: "serve", description: "the brain only: serve node-local states on the API (default unix:///run/kpng.sock and tcp://127.0.0.1:12090)" },
  args: { ...sourceArgs, ...listenArgs, "metrics-bind-address": { type: "string", description: "address:port for /metrics (default: none; a brain beside a node's kpng would take its port)" } },
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, { ...sourceArgs, ...listenArgs, "metrics-bind-address": proxyArgs["metrics-bind-address"] });
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
} as const satisfies ArgsDef;

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
    const stop = new AbortController();
    void waitForSignal().then(() => stop.abort());
    log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), api: args.api ?? DEFAULT_API });
    const { runSidecar } = await import("./plugins/sidecar.ts");
    await runSidecar({ backends, api: args.api, security, nodeName: cfg.nodeName, protocol: args.protocol, once: args.once === true, signal: stop.signal, log: log.child("client") });
    for (const b of backends) await b.close?.();
  },
});

const localCommand = defineCommand({
  meta: { name: "local", description: "print the node-local state and exit" },
  args: { ...sourceArgs, ...apiClientArgs, output: { type: "string", alias: ["o"], default: "json", description: "json or yaml" } },
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, { ...sourceArgs, ...apiClientArgs, output: { type: "string", alias: ["o"] } });
    if (args.output !== "json" && args.output !== "yaml") throw new KpngError("invalid_argument", `flag --output: "${args.output}" must be json or yaml`);
    const { brain, source } = await startBrain(args, rawArgs, cfg);
    const state = await brain.view(cfg.nodeName).next(0);
    source.close();
    process.stdout.write(formatLocalState(state, args.output));
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
  process.stderr.write(`kpng: ${errorMessage(err)}\n`);
  process.exit(isInvalidArgument(err) ? 2 : 1);
}

// citty would also run the parent's `run` after a subcommand, so dispatch here.
const argv = process.argv.slice(2);
const sub = subCommands[argv[0] ?? ""];
const [cmd, rawArgs] = sub ? [sub, argv.slice(1)] : [runCommand, argv];
process.on("unhandledRejection", fail);
try {
  if (rawArgs.includes("--help") || rawArgs.includes("-h")) await showUsage(cmd);
  else await runCommand_(cmd, { rawArgs });
} catch (err) {
  fail(err);
}
process.exit(0);
