#!/usr/bin/env bun
// kpng's command line: flags, subcommands and wiring. Only this file exits
// the process; everything below it throws KpngError.

import { defineCommand, type ArgsDef, type CommandContext, type ParsedArgs } from "citty";
import { versionInfo } from "./core/version.ts";
import type { Brain, NodeView, Revision } from "./core/brain/brain.ts";
import { formatUsage, parseArgv, type FlagDefs, type ParsedArgv } from "./core/config/argv.ts";
import type { Config } from "./core/config/config.ts";
import { modeOfBackend } from "./core/config/kube-proxy-config.ts";
import { kubeClientArgs, kubeProxyArgs, logArgs } from "./core/config/kube-proxy-flags.ts";
import { loadConfig, writeConfigFile, type CommandConfig } from "./core/config/load-config.ts";
import { errorMessage, invalid, isInvalidArgument, KpngError } from "./core/errors.ts";
import {
  apiClientArgs,
  backendNames,
  checkBackendPlatform,
  listenArgs,
  listenOff,
  modeSource,
  proxyArgs,
  repeated,
  sourceArgs,
  type Args,
} from "./core/config/flags.ts";
import { createLogger, jsonLine, logFormat } from "./core/log.ts";
import { LateServers } from "./core/node/late-servers.ts";
import type { Backend, BackendContext } from "./host/backend.ts";
import { builtinBackend } from "./host/registry.ts";
import { getArgs, verifyArgs } from "./core/introspect/args.ts";
// Everything else loads when a command needs it: `--version` and `--help` evaluate none of
// it (protobuf-es' registries, prom-client, the backends), and the run command starts its
// lists before it loads what they do not need. The API server and client (Connect, HTTP/2)
// load only when a command uses them: a node proxy without --listen never pays their
// start-up time and memory.
import { DEFAULT_LISTEN, DEFAULT_UNIX_SOCKET as DEFAULT_API } from "./core/api/server/address.ts";
import type { ApiServer } from "./core/api/server/index.ts";
import type { Listener } from "./core/api/server/listener.ts";
import type { IntrospectSource } from "./core/introspect/routes.ts";
import type { BackendEvents } from "./core/node/backend-events.ts";
import type { NodeEventOptions } from "./core/node/events.ts";
import type { BackendsIntrospection } from "./host/introspect.ts";
import { apiClientSecurity, serveSecurity, type ServeSecurity } from "./core/api/tls/flags.ts";

const log = createLogger("kpng");

async function newBrain(cfg: Config): Promise<Brain> {
  const { Brain } = await import("./core/brain/brain.ts");
  return new Brain({ serviceProxyName: cfg.serviceProxyName, nodeIPOverride: { node: cfg.nodeName, ips: cfg.nodeIPs } });
}

const startSource: typeof import("./core/sources/index.ts").startSource = async (...args) =>
  (await import("./core/sources/index.ts")).startSource(...args);

const setConntrack: typeof import("./core/node/node-setup.ts").setConntrack = async (...args) =>
  (await import("./core/node/node-setup.ts")).setConntrack(...args);

const cleanupBackends: typeof import("./host/cleanup.ts").cleanupBackends = async (...args) =>
  (await import("./host/cleanup.ts")).cleanupBackends(...args);

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
  const brain = await newBrain(cfg);
  const source = await startSource({ ...sourceOptions(args, rawArgs), ...opts }, cfg, brain, log);
  return { brain, source };
}

/** Backends print to stdout (--dry-run's rules) and log as kpng. */
const backendContext = (cfg: Config): BackendContext => ({ config: cfg, log, out: (t) => process.stdout.write(t) });

/** --backend/--proxy-mode (kube-proxy's mode names too), else the config file's mode, else the default; then every --plugin. */
async function loadAskedBackends(rawArgs: string[], ctx: BackendContext): Promise<Backend[]> {
  const { loadBackends } = await import("./host/loader.ts");
  return loadBackends({ builtins: backendNames(rawArgs, ctx.config), plugins: repeated(rawArgs, "plugin") }, ctx);
}

/** The revisions' own log lines: each full computation, and the node's IPs whenever they change. */
function logRevisions(nodeName: string): (rev: Revision) => void {
  let nodeIPs: readonly string[] | undefined;
  return (rev) => {
    if (rev.change === null) log.info("node-local state computed", { rev: rev.state.rev, services: rev.state.services.size });
    if (rev.state.nodeIPs === nodeIPs) return;
    if (nodeIPs || rev.state.nodeIPs?.length) log.info("node IPs", { node: nodeName, ips: rev.state.nodeIPs?.join(",") ?? "" });
    nodeIPs = rev.state.nodeIPs;
  };
}

/**
 * The in-process backends, fed every revision of `view` and reported to the
 * health and metrics servers. Resolves once every backend holds its first
 * sync and, after it, kube-proxy's rules are gone.
 */
async function feedFromView(
  view: NodeView,
  backends: readonly Backend[],
  opts: { cfg: Config; servers: LateServers | undefined; introspection?: BackendsIntrospection; events?: BackendEvents },
): Promise<{ startedUp: Promise<void> }> {
  const { cfg, servers, introspection, events } = opts;
  const [{ memoryRelease }, { feedAll }, { removeKubeProxyRules }] = await Promise.all([
    import("./core/release-memory.ts"),
    import("./host/feed-all.ts"),
    import("./host/cleanup.ts"),
  ]);
  const startedUp = Promise.withResolvers<void>();
  let migrated: Promise<void> | undefined;
  const memory = memoryRelease(log);
  const feeds = feedAll(backends, {
    log,
    onSynced: (b, state, seconds, change) => {
      servers?.synced(b.name, state, seconds, change);
      introspection?.synced(b, state, seconds);
      events?.synced(b.name, change === null);
      memory.synced();
    },
    onStartedUp: () => {
      normalJIT();
      startedUp.resolve();
      if (!cfg.dryRun)
        migrated = removeKubeProxyRules(
          backends.map((b) => b.name),
          log,
          // a long run watches for another proxy's rules coming back (--once has no servers: it exits)
          servers ? (sign, present) => servers.foreignProxy(sign, present) : undefined,
        );
      // The health and metrics servers start now (late-servers.ts); start-up's collection follows, and frees what their start left too.
      void Promise.resolve(servers?.start()).then(() => memory.startedUp(migrated));
    },
    onError: (b, err) => {
      servers?.failed(b.name, err);
      introspection?.failed(b, err);
      events?.failed(b.name, err);
    },
    onRulesLost: (b, reason) => {
      servers?.rulesLost(b.name, reason);
      events?.rulesLost(b.name, reason);
    },
  });
  const logRevision = logRevisions(cfg.nodeName);
  view.subscribe((rev) => {
    logRevision(rev);
    servers?.queued(rev);
    feeds.push(rev);
  });
  return { startedUp: startedUp.promise.then(() => migrated) };
}

/** A command as the dispatcher at the bottom runs it: its description and flags (--help, argv.ts), and its run on the parsed flags. */
interface Command {
  description: string;
  args: FlagDefs;
  /** takes arguments besides flags (`kpng get services NS/NAME`); kube-proxy's own command takes none */
  positionals?: boolean;
  /** the usage line of --help, when it is more than `kpng NAME [flags]` */
  usage?: string;
  run(parsed: ParsedArgv): Promise<void>;
}

/**
 * citty's definition, typed by its own flags; argv.ts parses them (no
 * positional arguments: `_` is empty). Every such command starts from its
 * flags and --config file loaded into one checked Config (load-config.ts).
 */
function command<const T extends ArgsDef & FlagDefs>(def: {
  name: string;
  description: string;
  args: T;
  run(ctx: CommandContext<T>, cfg: CommandConfig): Promise<void>;
}): Command {
  const cmd = defineCommand({ meta: { name: def.name, description: def.description }, args: def.args });
  return {
    description: def.description,
    args: def.args,
    run: async (parsed) => {
      const ctx: CommandContext<T> = { args: { _: [], ...parsed.args } as ParsedArgs<T>, rawArgs: parsed.rawArgs, cmd, data: undefined };
      return def.run(ctx, await loadConfig({ args: ctx.args, rawArgs: parsed.rawArgs, defs: def.args, log }));
    },
  };
}

const runCommand = command({
  name: "kpng",
  description: "Kubernetes service proxy: the brain plus in-process backends (kube-proxy's flags and configuration are accepted)",
  args: { ...sourceArgs, ...apiClientArgs, ...proxyArgs, ...listenArgs, ...kubeProxyArgs, ...logArgs },
  async run({ args, rawArgs }, cfg) {
    if (typeof args["write-config-to"] === "string")
      return writeConfigFile({ file: args["write-config-to"], cfg, version: args["write-config-version"], log });
    const names = backendNames(rawArgs, cfg);
    if (args["init-only"]) return setConntrack(cfg, names, log);
    const ctx = backendContext(cfg);
    if (args.cleanup) return cleanupBackends(await loadAskedBackends(rawArgs, ctx), ctx);
    return runProxy({ args, rawArgs, cfg, names, ctx });
  },
});

/** The run command's flags, the Config and the backends' context, as its steps share them. */
interface ProxyRun {
  args: Args;
  rawArgs: string[];
  cfg: Config;
  /** the built-in backends asked for */
  names: string[];
  ctx: BackendContext;
}

/**
 * The node's proxy: checks, start-up in the order that keeps it short, then
 * until a signal (or --once's first sync), then everything closed.
 */
async function runProxy(run: ProxyRun): Promise<void> {
  const { args, cfg, ctx } = run;
  const plan = checkProxyFlags(run);
  const brain = await newBrain(cfg);
  // Handlers go in first: a SIGTERM during start-up must still clean up (the API socket above all).
  const stopped = args.once ? undefined : waitForSignal();
  const loaded = Promise.withResolvers<string[]>();
  const servers = args.once ? undefined : lateServers(cfg, brain, loaded.promise);
  ctx.metrics = servers?.backendMetrics;
  const up = await startUp(run, { brain, sources: plan.sources, servers, loaded, stopped });
  if (!up) return servers?.close();
  const { source, backends, podCIDRs } = up;
  // Once the source is up: bad input (a broken --input file) stays a single line on stderr.
  log.info("proxy mode", { mode: run.names.map((n) => modeOfBackend(n) || n).join(","), from: modeSource(run.rawArgs, cfg) });
  servers?.setSource(source);
  const served = await serveIntrospection(run, plan, brain, backends);
  if (served.api) servers?.followApi(served.api);
  const view = brain.view(cfg.nodeName);
  const { nodeIPsBeforeFirstSync } = await import("./core/sources/index.ts");
  await nodeIPsBeforeFirstSync(view, { input: plan.sources.input, nodeIPs: cfg.nodeIPs, stopped, log });
  await up.ready;
  const { warned, events } = await nodeEvents(run, plan.sources, servers, backends);
  const { startedUp } = await feedFromView(view, backends, { cfg, servers, introspection: served.introspection, events });
  log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), dryRun: cfg.dryRun });
  // Loading its server (Connect, HTTP/2) took CPU from the first sync: it follows it, or a first sync that takes long (a backend that keeps failing).
  served.serveDefaultSocket(Promise.race([startedUp, Bun.sleep(DEFAULT_SOCKET_LATEST_MS)]));
  // --once: until the first sync's work is done (kube-proxy's rules, the Node's events); else until a signal.
  if (args.once) await startedUp.then(() => Promise.all([warned, events?.flush()]));
  // a port taken with bindAddressHardFail ends kpng, and so do new pod CIDRs under NodeCIDR (exit 1: restarted with them)
  else if (servers) await Promise.race([stopped, servers.cannotStart, ...(podCIDRs ? [podCIDRs.changed] : [])]);
  podCIDRs?.stop();
  servers?.close();
  await served.close();
  source.close();
  for (const b of backends) await b.close?.();
}

/** Every flag checked before anything starts: a name that is no backend, or a bad --listen, stops kpng (exit 2) before the backends load. */
function checkProxyFlags({ args, rawArgs, cfg, names }: ProxyRun) {
  for (const name of names) builtinBackend(name);
  checkBackendPlatform(names, cfg.dryRun);
  const listen = repeated(rawArgs, "listen");
  const sources = sourceOptions(args, rawArgs);
  return {
    listen,
    // Without --listen, `kpng get` and `kpng verify` still reach this kpng on the default socket; --once exits too soon to be asked.
    defaultSocket: !listen.length && !listenOff(rawArgs) && !args.once,
    sources,
    security: serveSecurity(args, listen, sources),
  };
}

type ProxyPlan = ReturnType<typeof checkProxyFlags>;

/**
 * Health and metrics start after the first sync, or SERVERS_LATEST_MS after the start when
 * the API server is slow or down; what is reported before (the API client's requests, the
 * agent's stream, revisions, syncs) is held for them with its time (late-servers.ts).
 */
function lateServers(cfg: Config, brain: Brain, loaded: Promise<string[]>): LateServers {
  return new LateServers({
    latestMs: SERVERS_LATEST_MS,
    start: async () => {
      const [{ startProxyServers }, backends] = await Promise.all([import("./core/node/proxy-servers.ts"), loaded]);
      return startProxyServers({ cfg, brain, log: log.child("serve"), backends });
    },
  });
}

/**
 * The lists go out first: the backends' loading, the OOM score and the backends' setup then
 * run while the API server answers, each in its own turn of the event loop so that the
 * connections' TLS handshakes move on in between. Resolves once the source is up (undefined:
 * a signal came first); `ready` once every backend is set up and the conntrack sysctls are set.
 */
async function startUp(
  { args, rawArgs, cfg, names, ctx }: ProxyRun,
  o: {
    brain: Brain;
    sources: ProxyPlan["sources"];
    servers: LateServers | undefined;
    /** told the backends' names once they are loaded (the health and metrics servers wait for them) */
    loaded: PromiseWithResolvers<string[]>;
    stopped: Promise<void> | undefined;
  },
) {
  const { brain, sources, servers, stopped } = o;
  const starting = startSource(
    { ...sources, onGlobalStats: (stats) => servers?.followGlobal(stats), restClient: servers?.restClient },
    cfg,
    brain,
    log,
  );
  starting.catch(() => {}); // awaited below, after the backends' setup has started
  await nextTurn(); // the lists' requests are on their way
  // detectLocalMode NodeCIDR: the backends are created with the Node's pod CIDRs, as kube-proxy creates its proxier.
  const podCIDRs =
    cfg.localDetect?.kind === "node-cidr" ? await nodePodCIDRs({ cfg, brain, starting, stopped, file: sources.input }) : undefined;
  if (podCIDRs === null) return undefined;
  // The backends' code evaluates while the API server answers.
  const backends = await loadAskedBackends(rawArgs, ctx);
  o.loaded.resolve(backends.map((b) => b.name));
  await nextTurn(); // the connections' TCP connects are seen here, their TLS handshakes start
  const { applyOOMScoreAdj } = await import("./core/node/node-setup.ts");
  if (!args.once) applyOOMScoreAdj(cfg, log);
  await nextTurn();
  // Backends get ready while the lists run (nft loads its skeleton with --check, which
  // used to follow the first compute); one that cannot work stops kpng at once.
  // Then the conntrack sysctls, as kube-proxy sets them before its proxier starts.
  const ready = Promise.all(backends.map((b) => b.setup?.(ctx))).then(() => setConntrack(cfg, names, log));
  const unready = ready.then(() => new Promise<never>(() => {}));
  // The first list may wait on an unreachable API server for as long as it is down: a SIGTERM meanwhile still stops kpng.
  const source = await untilStopped(Promise.race([starting, unready, ...(servers ? [servers.cannotStart] : [])]), stopped);
  return source && { source, backends, podCIDRs, ready };
}

/**
 * What `kpng get` and `kpng verify` ask: the whole API on every --listen address, or the
 * introspection service alone on the default socket (default-socket.ts), or nothing.
 */
async function serveIntrospection({ args, cfg }: ProxyRun, plan: ProxyPlan, brain: Brain, backends: Backend[]) {
  const { listen } = plan;
  // the backends' side of it (revisions held, kernel read-back): only where something is served
  const introspection =
    listen.length || plan.defaultSocket
      ? new (await import("./host/introspect.ts")).BackendsIntrospection(backends, cfg.nodePortAddresses)
      : undefined;
  const api = listen.length ? await serveApi(brain, cfg, listen, plan.security, args, introspection) : undefined;
  let local: Promise<Listener | undefined> | undefined;
  let closed = false;
  return {
    introspection,
    api,
    /** the default socket, once `when` resolves; it never fails start-up (default-socket.ts) */
    serveDefaultSocket(when: Promise<unknown>) {
      if (!plan.defaultSocket || !introspection) return;
      local = when.then(async () =>
        closed
          ? undefined
          : (await import("./core/introspect/default-socket.ts")).serveDefaultSocket({
              brain,
              nodeName: cfg.nodeName,
              source: introspection,
              log: log.child("api"),
            }),
      );
    },
    close: async () => {
      closed = true;
      await api?.close();
      await (await local)?.close();
    },
  };
}

/**
 * The Node's events, from a cluster source only: kube-proxy's start-up warnings (the IPVS
 * deprecation; not awaited: start-up never waits on it), and failed syncs and repaired
 * rules (backend-events.ts).
 */
async function nodeEvents({ args, cfg }: ProxyRun, sources: ProxyPlan["sources"], servers: LateServers | undefined, backends: Backend[]) {
  if (args.input !== undefined || args.api !== undefined) return {};
  const eventOptions: NodeEventOptions = {
    kubeconfig: sources.kubeconfig,
    master: sources.master,
    config: cfg,
    log: log.child("events"),
    restClient: servers?.restClient,
  };
  const { recordStartWarnings } = await import("./core/node/start-warnings.ts");
  const warned = recordStartWarnings(
    backends.flatMap((b) => (b.nodeWarning ? [b.nodeWarning] : [])),
    eventOptions,
  );
  const events = new (await import("./core/node/backend-events.ts")).BackendEvents({
    record: async (f) => (await import("./core/node/events.ts")).recordNodeEvent(eventOptions, f),
  });
  return { warned, events };
}

/**
 * NodeCIDR (node-pod-cidrs.ts): once the source is up, the Node's pod CIDRs
 * go into the Config the backends are created with, and are watched for a
 * change. null: stopped by a signal meanwhile.
 */
async function nodePodCIDRs(o: { cfg: Config; brain: Brain; starting: Promise<unknown>; stopped?: Promise<void>; file?: string }) {
  const { cfg, brain, stopped } = o;
  const { waitForPodCIDRs, watchPodCIDRs } = await import("./core/node/node-pod-cidrs.ts");
  if (!(await untilStopped(o.starting, stopped))) return null;
  // an --input file is the whole cluster: a Node without pod CIDRs in it will not get any by waiting
  const cidrs = await untilStopped(waitForPodCIDRs(brain, cfg.nodeName, { log, timeoutMs: o.file === undefined ? undefined : 0 }), stopped);
  if (!cidrs || cfg.localDetect?.kind !== "node-cidr") return null;
  cfg.localDetect.cidrs = cidrs;
  log.info("detectLocalMode NodeCIDR", { node: cfg.nodeName, podCIDRs: cidrs.join(",") });
  return watchPodCIDRs(brain, cfg.nodeName, cidrs);
}

async function serveApi(
  brain: Brain,
  cfg: Config,
  listen: string[],
  security: ServeSecurity,
  args: Args,
  introspect?: IntrospectSource,
): Promise<ApiServer> {
  const { startApiServer } = await import("./core/api/server/index.ts");
  const tokens = security.tokenUsers.length ? await tokenReviewer(args, cfg, security.tokenUsers) : undefined;
  return startApiServer({
    brain,
    listen,
    listenAny: security.listenAny,
    tls: security.tls,
    auth: { tokens },
    defaultNodeName: cfg.nodeName,
    log: log.child("api"),
    introspect,
  });
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
    import("./core/kube-http/request.ts"),
    import("./core/sources/kubeconfig.ts"),
    import("node:https"),
  ]);
  const access = loadKubeConfig({
    kubeconfig: (args.kubeconfig as string | undefined) || cfg.kubeconfig || undefined,
    master: args.master as string | undefined,
  });
  return tokenReviewer({ request: kubeRequest(access, new Agent({ keepAlive: true })), users });
}

const serveCommand = command({
  name: "serve",
  description: "the brain only: serve node-local states on the API (default unix:///run/kpng.sock and tcp://127.0.0.1:12090)",
  args: {
    ...sourceArgs,
    ...kubeClientArgs,
    ...listenArgs,
    "metrics-bind-address": {
      type: "string",
      description: "address:port for /metrics (default: none; a brain beside a node's kpng would take its port)",
    },
    ...logArgs,
  },
  async run({ args, rawArgs }, cfg) {
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
    normalJIT();
    const metrics = typeof args["metrics-bind-address"] === "string" ? await serveBrainMetrics(brain, cfg, source, api) : undefined;
    await stopped;
    metrics?.close();
    await api.close();
    source.close();
  },
});

const backendCommand = command({
  name: "backend",
  description: "backends only: follow a brain over the API (a sidecar)",
  args: {
    ...proxyArgs,
    ...apiClientArgs,
    "node-name": sourceArgs["node-name"],
    config: sourceArgs.config,
    api: { type: "string", description: `the brain's API: unix:///path or tcp://HOST:PORT (default ${DEFAULT_API})` },
    protocol: { type: "string", description: "watch (diff stream, default) or next (full-state long poll)" },
    ...logArgs,
  },
  async run({ args, rawArgs }, cfg) {
    if (args.protocol !== undefined && args.protocol !== "watch" && args.protocol !== "next")
      throw new KpngError("invalid_argument", `flag --protocol: "${args.protocol}" must be watch or next`);
    const security = apiClientSecurity(args, [args.api ?? DEFAULT_API], log);
    const ctx = backendContext(cfg);
    const backends = await loadAskedBackends(rawArgs, ctx);
    if (args.cleanup) return cleanupBackends(backends, ctx);
    if (cfg.localDetect?.kind === "node-cidr")
      throw invalid(
        "detectLocalMode NodeCIDR: a sidecar cannot read the Node's spec.podCIDRs (the brain's API does not carry them); use ClusterCIDR with --cluster-cidr, or an interface mode",
      );
    for (const b of backends) await b.setup?.(ctx);
    // A sidecar programs the node's rules too: the same conntrack sysctls (from its --config).
    await setConntrack(cfg, backendNames(rawArgs, cfg), log);
    const stop = new AbortController();
    void waitForSignal().then(() => stop.abort());
    log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), api: args.api ?? DEFAULT_API });
    normalJIT();
    const { runSidecar } = await import("./host/sidecar.ts");
    await runSidecar({
      backends,
      api: args.api,
      security,
      nodeName: cfg.nodeName,
      protocol: args.protocol,
      once: args.once === true,
      signal: stop.signal,
      log: log.child("client"),
    });
    for (const b of backends) await b.close?.();
  },
});

const localCommand = command({
  name: "local",
  description: "print the node-local state and exit",
  args: {
    ...sourceArgs,
    ...kubeClientArgs,
    ...apiClientArgs,
    output: { type: "string", alias: ["o"], default: "json", description: "json or yaml" },
    ...logArgs,
  },
  async run({ args, rawArgs }, cfg) {
    const output = args.output ?? "json";
    if (output !== "json" && output !== "yaml") throw new KpngError("invalid_argument", `flag --output: "${output}" must be json or yaml`);
    const { brain, source } = await startBrain(args, rawArgs, cfg);
    const state = await brain.view(cfg.nodeName).next(0);
    source.close();
    const { formatLocalState } = await import("./core/brain/output.ts");
    process.stdout.write(formatLocalState(state, output));
  },
});

/**
 * The compiled binary starts with the JIT reluctant to compile (build.ts
 * jitPolicy): start-up code runs once, and compiling it took as much CPU as
 * running it, on a node's two cores beside the API server's answers. Once
 * start-up is over (the first sync, or the brain serving), the JIT works as
 * usual for what runs again and again.
 */
const normalJIT = () => Bun.unsafe.setJITPolicy?.(1);

/** ms after the process started by which the health and metrics servers answer, first sync or not (twice that when a first sync is under way then) */
const SERVERS_LATEST_MS = 1000;

/** ms after start-up's feeding began by which the default socket answers, first sync done or not */
const DEFAULT_SOCKET_LATEST_MS = 5000;

/** after the I/O that is due (setImmediate runs after the event loop's poll phase) */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

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

const getCommand: Command = {
  description: "show what the running kpng on this node holds: services|endpoints [NAMESPACE/NAME] (its API socket)",
  args: getArgs,
  usage: "kpng get services|endpoints [NAMESPACE/NAME] [flags]",
  positionals: true,
  run: async (parsed) => (await import("./core/introspect/commands.ts")).runGet(parsed, (t) => process.stdout.write(t)),
};

const verifyCommand: Command = {
  description: "read the kernel back through the running kpng's backends: exit 0 only if it holds what they programmed",
  args: verifyArgs,
  usage: "kpng verify [NAMESPACE/NAME] [flags]",
  positionals: true,
  run: async (parsed) => (await import("./core/introspect/commands.ts")).runVerify(parsed, (t) => process.stdout.write(t)),
};

const subCommands: Record<string, Command> = {
  local: localCommand,
  serve: serveCommand,
  backend: backendCommand,
  get: getCommand,
  verify: verifyCommand,
};

/** Bad input -> one line and exit 2; anything else -> exit 1. */
function fail(err: unknown): never {
  // With --logging-format=json every stderr line stays JSON (component-base's cli.Run logs "command failed").
  if (logFormat() === "json")
    process.stderr.write(
      jsonLine(performance.timeOrigin + performance.now(), "error", 0, "kpng", "command failed", { error: errorMessage(err) }) + "\n",
    );
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
kpng local   [source flags] --node-name NAME [-o json|yaml]
kpng get     services|endpoints [NAMESPACE/NAME] [-o wide|json|yaml] [--server ADDR]
kpng verify  [NAMESPACE/NAME] [--server ADDR]`;

function usage(cmd: Command, name: string): string {
  const commands = Object.entries(subCommands).map(([n, c]) => ({ name: n, description: c.description }));
  return formatUsage({
    usage: name ? (cmd.usage ?? `kpng ${name} [flags]`) : USAGE,
    description: cmd.description,
    commands: name ? [] : commands,
    defs: { ...cmd.args, ...globalArgs },
  });
}

/** `--version`: kpng's version (package.json), as kube-proxy prints its own; `--version=raw`: version.Info as JSON. */
function versionText(v: string): string {
  const info = versionInfo();
  return v === "raw" ? JSON.stringify(info, null, 2) : `kpng ${info.gitVersion}`;
}

// citty would also run the parent's `run` after a subcommand, and its parser
// is not pflag's, so parse (argv.ts) and dispatch here.
const argv = process.argv.slice(2);
const subName = Object.hasOwn(subCommands, argv[0] ?? "") ? argv[0] : "";
const cmd = subName ? subCommands[subName] : runCommand;
process.on("unhandledRejection", fail);
try {
  const parsed = parseArgv(subName ? argv.slice(1) : argv, { ...cmd.args, ...globalArgs }, { positionals: cmd.positionals });
  const version = parsed.args.version;
  if (parsed.args.help) process.stdout.write(usage(cmd, subName));
  // verflag: --version / --version=raw print and exit; --version=vX.Y.Z only sets the reported version (no effect here).
  else if (version === "true" || version === "raw") process.stdout.write(versionText(version) + "\n");
  else await cmd.run(parsed);
} catch (err) {
  fail(err);
}
process.exit(0);
