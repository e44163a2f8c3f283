// The typed Backend interface every backend implements, built-in or third
// party, in-process or as a sidecar. A backend knows nothing of Kubernetes
// objects: it sees only the node-local state.
//
// Two flavours, as the KEP promises:
// - full state: `apply(state, change)` after each change set; `change` names
//   the services that changed (null = everything: first sync or after a failure);
// - incremental: set/delete calls for each service and endpoint, then `sync()`.

import type { Config } from "../core/config/config.ts";
import type { Logger } from "../core/log.ts";
import type { Endpoint, NodeState, Service, StateChange } from "../core/brain/state.ts";
import type { IPVersion } from "./toolkit/family.ts";
import type { EndpointSchema, ServiceSchema } from "../gen/localv1/services_pb.ts";
import type * as Toolkit from "./toolkit/index.ts";

/** Runs a program with some stdin; the only door to the kernel. Swapped for a recorder in tests. */
export interface Executor {
  /** `opts.doneAt`: the program's work is done once it prints that line (toolkit runCommand); an executor may ignore it and wait for the exit */
  run(argv: string[], stdin?: string, opts?: Toolkit.RunOptions): Promise<string>;
  /**
   * As `run`, with stdin written as `chunks` yields them, each made when the
   * program has read the one before (a big iptables restore parses while
   * kpng still renders); a promised chunk is written once it resolves.
   * Optional: without it, callers wait for the chunks, join them and `run`.
   */
  stream?(argv: string[], chunks: Iterable<Toolkit.StdinChunk>, opts?: Toolkit.RunOptions): Promise<string>;
}

export interface BackendContext {
  config: Config;
  log: Logger;
  /** where `--dry-run` output goes (stdout by default) */
  out: (text: string) => void;
  /** where a backend reports what happens inside its syncs (metrics); read at report time, absent = not reported */
  metrics?: BackendMetrics;
  /**
   * The toolkit's functions (src/host/toolkit/), set by the loader for
   * every backend it makes: a `--plugin` file loaded by the compiled binary
   * can import kpng's types only, and finds the functions here. Built-in
   * backends import the toolkit instead.
   */
  toolkit?: typeof Toolkit & PluginSchemas;
}

/**
 * protobuf-es' schemas of the node-local messages, which the toolkit module
 * exported until it stopped loading the generated file at start-up (its
 * descriptor registry is built on import): a plugin written against that
 * toolkit still finds them in `ctx.toolkit`, built on its first read.
 */
export interface PluginSchemas {
  readonly ServiceSchema: typeof ServiceSchema;
  readonly EndpointSchema: typeof EndpointSchema;
}

/**
 * kube-proxy's mode-specific metrics for what happens inside a sync (the
 * feed sees whole syncs only). Families as IP versions (4, 6).
 */
export interface BackendMetrics {
  /** `backend`'s transaction for `family` (`nft -f`, `iptables-restore`) was refused; `partial`: a partial sync's */
  transactionFailed(backend: string, family: IPVersion, partial: boolean): void;
  /** stale UDP conntrack entries of `family` cleaned up after a sync: how long it took, how many deletions succeeded */
  conntrackReconciled(family: IPVersion, seconds: number, deleted: number): void;
  /** after an iptables sync: the rules kpng owns in `table`, and how many this sync wrote */
  iptablesRules(family: IPVersion, table: string, total: number, written: number): void;
  /** `backend` compared the kernel with what it programmed (Backend.verify, every Service): how many differences it found */
  rulesDrift(backend: string, differences: number): void;
}

/** A Warning event on this Node, recorded once at start-up (kube-proxy records one for IPVS mode). */
export interface NodeWarning {
  reason: string;
  note: string;
}

interface BackendBase {
  readonly name: string;
  /**
   * Recorded by `kpng` as a Warning event on the Node at start-up, when its
   * source is the API server (not from a file or a brain), as kube-proxy
   * records its IPVS deprecation.
   */
  readonly nodeWarning?: NodeWarning;
  /** called once before the first sync; may fail with a clear error (e.g. kernel lacks a feature) */
  setup?(ctx: BackendContext): Promise<void>;
  /** `--cleanup`: remove everything this backend ever created */
  cleanup?(ctx: BackendContext): Promise<void>;
  /** called on shutdown; rules stay in place */
  close?(): Promise<void>;
  /**
   * Called once by the feed before the first sync: `report` is where the
   * backend says, between syncs, that its rules were changed or removed by
   * someone else (a flushed ruleset, a deleted table or chain). The backend
   * makes its next sync full; the feed runs one at once, and /healthz
   * answers 503 until it succeeded.
   */
  watchRules?(report: (reason: string) => void): void;
  /**
   * `kpng verify`: read the kernel back (one read, not a sync) and name what
   * differs from what this backend last programmed. `service` ("namespace/name")
   * narrows the check to one Service; an empty list means the kernel holds
   * what was programmed.
   */
  verify?(service?: string): Promise<Drift[]>;
}

/** One difference between what a backend programmed and what the kernel holds. */
export interface Drift {
  /** "namespace/name" of the Service, or "" for the backend's own base rules */
  service: string;
  /** the frontend, as kubectl would name it: "10.96.0.10:53/UDP", "nodePort 30080/TCP", "" for the whole Service */
  frontend: string;
  /** missing: programmed but absent from the kernel; extra: in the kernel, not programmed; differs: present with other content */
  kind: "missing" | "extra" | "differs";
  /** what was looked for and what was found, one line (a set element, a rule, a map entry) */
  detail: string;
}

export interface FullStateBackend extends BackendBase {
  readonly kind: "full";
  apply(state: NodeState, change: StateChange): Promise<void>;
}

export interface IncrementalBackend extends BackendBase {
  readonly kind: "incremental";
  /**
   * The node's IPs changed (NodeState.nodeIPs; before any call: Config.nodeIPs).
   * Called before the change set's other calls; the following sync must
   * re-program what depends on them.
   */
  setNodeIPs?(ips: readonly string[]): void;
  setService(service: Service): void;
  deleteService(namespace: string, name: string): void;
  setEndpoint(namespace: string, serviceName: string, key: string, endpoint: Endpoint): void;
  deleteEndpoint(namespace: string, serviceName: string, key: string): void;
  /** end of a change set: program what the calls since the last sync described */
  sync(): Promise<void>;
}

export type Backend = FullStateBackend | IncrementalBackend;

/** What a backend module default-exports: a factory, so one module can serve several runs. */
export type BackendFactory = (ctx: BackendContext) => Backend | Promise<Backend>;
