// The API server: the brain's node-local states over gRPC and Connect on
// every `--listen` address. One brain serves any node name the cluster has;
// each stream picks its node.

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { randomBytes } from "node:crypto";
import { Sets as GlobalSets, type GlobalWatchReq } from "../../../gen/globalv1/global_pb.ts";
import {
  Endpoints,
  NextItemSchema,
  Sets,
  type NextFilter,
  type NextItem,
  type OpItem,
  type WatchReq,
} from "../../../gen/localv1/services_pb.ts";
import type { Brain, NodeView } from "../../brain/brain.ts";
import { errorMessage } from "../../errors.ts";
import { GlobalModel } from "../../global/model.ts";
import type { Logger } from "../../log.ts";
import { checkListen, crossesNetwork, formatApiAddress, parseApiAddress, type ApiAddress } from "./address.ts";
import { Authenticator, writeRefusal, type AuthOptions, type PeerSocket, type RefusalReason } from "./auth.ts";
import { readTlsFiles, SERVER_FLAGS, watchTlsFiles, type TlsFiles } from "../tls/files.ts";
import { MAX_REQUEST_MESSAGE, serveGrpcFast, type FastRoutes } from "./grpc-fast.ts";
import { Slots } from "./slots.ts";
import { dropWhenStuck, type WatchedResponse } from "./drop-stalled-response.ts";
import { answering400, listen, type Listener } from "./listener.ts";
import { nextState, type NextDeps } from "./full-state-poll.ts";
import { globalWatchBatches } from "./global-watch.ts";
import { watchBatches, type WatchDeps } from "./watch.ts";
import type { WireOp } from "../../wire/ops.ts";
import { introspectRoutes, type IntrospectSource } from "../../introspect/routes.ts";
import { encodeNextHead, encodeServiceEndpoints, toOpItem, WireCache } from "./wire.ts";

export { checkListen, DEFAULT_LISTEN } from "./address.ts";

export interface ApiOptions {
  brain: Brain;
  /** the node a Next call without NodeName gets (the brain's own) */
  defaultNodeName: string;
  log: Logger;
  /** random per brain start unless given (tests) */
  instanceID?: bigint;
  /** a gRPC stream whose client reads nothing for this long is dropped (default 30 s) */
  stuckMs?: number;
  /** streams sending a whole model at once, at most (default 64) */
  wholeModelsAtOnce?: number;
  /** the backends this process runs, for `kpng get` and `kpng verify` (absent: `kpng serve`, none) */
  introspect?: IntrospectSource;
}

export interface ApiServerOptions extends ApiOptions {
  /** `unix:///path` or `tcp://HOST:PORT` */
  listen: readonly string[];
  /** allow plaintext on non-loopback TCP addresses */
  listenAny?: boolean;
  /** a new connection that has not finished its TLS handshake and shown its protocol by then is closed (default listener.ts HANDSHAKE_MS) */
  handshakeMs?: number;
  /** TLS on every TCP listener: the server's certificate and key, and the client CA (mutual TLS) */
  tls?: ApiTlsOptions;
  /** who may connect over TLS (client certificates need `tls.files.ca`) */
  auth?: Omit<AuthOptions, "certificates">;
}

export interface ApiTlsOptions {
  files: TlsFiles;
  /** how often the files are read again for a rotated certificate (default 2000 ms) */
  reloadMs?: number;
}

export interface ApiServer {
  readonly addresses: ApiAddress[];
  readonly instanceID: bigint;
  /** requests and TLS handshakes refused, by reason */
  readonly refused: Readonly<Record<RefusalReason, number>>;
  /** gRPC streams dropped because their client stopped reading */
  readonly stats: { readonly stuckDropped: number };
  close(): Promise<void>;
}

/**
 * Long enough for a loaded agent to take a piece of a whole model (grpc-fast.ts PIECE); short
 * enough that stuck agents cannot pin old models and pieces for long.
 */
const STUCK_MS = 30_000;

/**
 * Streams sending a whole model at once, at most (see grpc-fast.ts): enough
 * to fill any link to the agents, few enough that the event loop keeps
 * answering pings while thousands of agents come back together.
 */
const WHOLE_MODELS_AT_ONCE = 64;

/** Resolves once every kind has synced; node names can only be checked then. */
async function whenSynced(brain: Brain, signal: AbortSignal): Promise<void> {
  while (!brain.isSynced) {
    if (signal.aborted) throw signal.reason;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The RPCs over both paths: Connect routes (also usable in memory) and the fast gRPC handler. */
export function createApi(opts: ApiOptions) {
  const { brain, log } = opts;
  const instanceID = opts.instanceID ?? randomBytes(8).readBigUInt64BE();
  const cache = new WireCache();
  const view = async (nodeName: string, signal: AbortSignal): Promise<NodeView> => {
    await whenSynced(brain, signal);
    // Views live as long as the brain: only names the cluster knows may create one.
    if (!brain.cluster.nodes.has(nodeName)) throw new ConnectError(`node "${nodeName}" is not a Node in the cluster`, Code.NotFound);
    return brain.view(nodeName);
  };
  const watchDeps: WatchDeps = { view, cache };
  // Created by the first global stream: a brain nobody asks for the global model does not keep one.
  let global: GlobalModel | undefined;
  const globalModel = async (signal: AbortSignal): Promise<GlobalModel> => {
    await whenSynced(brain, signal);
    return (global ??= new GlobalModel(brain));
  };
  const nextDeps: NextDeps = { view, instanceID, defaultNodeName: opts.defaultNodeName };
  const stats = { stuckDropped: 0 };
  const onError = (rpc: string, err: ConnectError, signal: AbortSignal) => {
    if (err.code !== Code.Canceled && !signal.aborted) log.warn("rpc failed", { rpc, code: Code[err.code], error: err.rawMessage });
  };

  const fast: FastRoutes = {
    watch: (reqs, signal) => watchBatches(watchDeps, reqs, signal),
    globalWatch: (reqs, signal) => globalWatchBatches(() => globalModel(signal), reqs, signal),
    async next(filter, signal) {
      const { nodeName, state } = await nextState(nextDeps, filter, signal);
      const items = [encodeNextHead(instanceID, BigInt(state.rev), nodeName)];
      for (const se of state.services.values()) items.push(encodeServiceEndpoints(se, cache));
      return items;
    },
    onError,
    stuckMs: opts.stuckMs ?? STUCK_MS,
    bigWrites: new Slots(opts.wholeModelsAtOnce ?? WHOLE_MODELS_AT_ONCE),
    onStuck: (rpc) => {
      stats.stuckDropped++;
      log.warn("dropped a stream whose client stopped reading (it resyncs when it reconnects)", { rpc, afterMs: opts.stuckMs ?? STUCK_MS });
    },
  };

  async function* logErrors<R>(rpc: string, signal: AbortSignal, gen: AsyncGenerator<R>): AsyncGenerator<R> {
    try {
      yield* gen;
    } catch (err) {
      const ce = ConnectError.from(err, Code.Internal);
      onError(rpc, ce, signal);
      throw ce;
    }
  }
  async function* connectWatch(reqs: AsyncIterable<WatchReq>, signal: AbortSignal): AsyncGenerator<OpItem> {
    yield* opItems(watchBatches(watchDeps, reqs, signal));
  }
  async function* connectGlobalWatch(reqs: AsyncIterable<GlobalWatchReq>, signal: AbortSignal): AsyncGenerator<OpItem> {
    yield* opItems(globalWatchBatches(() => globalModel(signal), reqs, signal));
  }
  async function* opItems(batches: AsyncGenerator<WireOp[]>): AsyncGenerator<OpItem> {
    // Not `for await`: see grpc-fast.ts (Bun keeps the last value of an idle loop alive).
    try {
      for (;;) {
        const r = await batches.next();
        if (r.done) return;
        for (const op of r.value) yield toOpItem(op);
      }
    } finally {
      await batches.return(undefined); // unsubscribes the stream from its view
    }
  }
  async function* connectNext(filter: NextFilter, signal: AbortSignal): AsyncGenerator<NextItem> {
    const { nodeName, state } = await nextState(nextDeps, filter, signal);
    yield create(NextItemSchema, { Next: { InstanceID: instanceID, Rev: BigInt(state.rev), NodeName: nodeName } });
    for (const se of state.services.values()) {
      yield create(NextItemSchema, {
        Endpoints: { Service: se.service, Endpoints: [...se.endpoints.values()], EndpointKeys: [...se.endpoints.keys()] },
      });
    }
  }
  const introspect = introspectRoutes({ brain, defaultNodeName: opts.defaultNodeName, source: opts.introspect });
  const routes = (router: ConnectRouter) => {
    introspect(router);
    router.service(Sets, { watch: (reqs, ctx) => logErrors("Watch", ctx.signal, connectWatch(reqs, ctx.signal)) });
    router.service(Endpoints, { next: (filter, ctx) => logErrors("Next", ctx.signal, connectNext(filter, ctx.signal)) });
    router.service(GlobalSets, { watch: (reqs, ctx) => logErrors("GlobalWatch", ctx.signal, connectGlobalWatch(reqs, ctx.signal)) });
  };
  return { instanceID, routes, fast, cache, stats, close: () => global?.close() };
}

/**
 * A sidecar on this node asks for the brain's own node: marshal its services
 * as each revision arrives, so the first stream costs what later ones do
 * (the first marshalling of a big state is the costly one).
 */
function warmOwnNode(brain: Brain, nodeName: string, cache: WireCache): () => void {
  const stop = new AbortController();
  let unsubscribe = () => {};
  whenSynced(brain, stop.signal)
    .then(() => {
      if (stop.signal.aborted || !brain.cluster.nodes.has(nodeName)) return;
      unsubscribe = brain.view(nodeName).subscribe(({ state, change }) => {
        for (const key of change ?? state.services.keys()) {
          const se = state.services.get(key);
          if (!se) continue;
          cache.service(se.service);
          for (const ep of se.endpoints.values()) cache.endpoint(ep);
        }
      });
    })
    .catch(() => {}); // aborted before the brain synced
  return () => {
    stop.abort();
    unsubscribe();
  };
}

export async function startApiServer(opts: ApiServerOptions): Promise<ApiServer> {
  const { log } = opts;
  checkListen(opts.listen, opts.listenAny ?? false, !!opts.tls);
  const addrs = opts.listen.map((spec) => parseApiAddress(spec));
  const material = opts.tls ? readTlsFiles(opts.tls.files, SERVER_FLAGS) : undefined;
  const auth = new Authenticator({ certificates: !!material?.ca, tokens: opts.auth?.tokens }, log);
  const api = createApi(opts);
  const connect = connectNodeAdapter({ routes: api.routes, readMaxBytes: MAX_REQUEST_MESSAGE });
  const handler: typeof connect = answering400(
    (req, res) => {
      if (serveGrpcFast(req as Parameters<typeof serveGrpcFast>[0], res as unknown as Parameters<typeof serveGrpcFast>[1], api.fast))
        return;
      dropWhenStuck(res as unknown as WatchedResponse, api.fast.stuckMs, () => api.fast.onStuck(req.url ?? ""));
      connect(req, res);
    },
    (path, err) => log.warn("bad request", { path, error: errorMessage(err) }),
  );
  // Over TLS, a request is served once its client is authenticated (see auth.ts).
  const secured: typeof connect = !auth.required
    ? handler
    : (req, res) => {
        auth.check(req.socket as PeerSocket, req.headers.authorization).then(
          (v) =>
            v.ok ? handler(req, res) : writeRefusal(req.headers["content-type"], res as Parameters<typeof writeRefusal>[1], v.message),
          () => res.end(),
        );
      };
  const tls = material && {
    material,
    onHandshakeError: (err: NodeJS.ErrnoException, peer: string | undefined) =>
      auth.handshakeFailed(
        err.code === "ECONNRESET"
          ? "TLS handshake ended by the client: it does not trust this certificate or its name (or it is a TCP probe)"
          : `TLS handshake failed: ${err.message}`,
        peer,
      ),
  };
  const listeners: Listener[] = [];
  try {
    for (const a of addrs)
      listeners.push(await listen(a, a.kind === "tcp" && tls ? secured : handler, { tls, handshakeMs: opts.handshakeMs }));
  } catch (err) {
    await Promise.all(listeners.map((l) => l.close()));
    throw err;
  }
  const addresses = listeners.map((l) => l.address);
  log.info("serving the API", {
    listen: addresses.map(formatApiAddress).join(","),
    tls: !!tls,
    clientCertificates: auth.required && !!material?.ca,
    tokenReview: !!opts.auth?.tokens,
  });
  const open = addresses.filter(crossesNetwork).map(formatApiAddress).join(",");
  if (open && !tls)
    log.warn(
      "serving the API in plaintext off loopback (--listen-any): anyone who reaches it reads every Service and endpoint, and anyone who can answer in its place programs the nodes",
      { listen: open },
    );
  if (open && tls && !auth.required)
    log.warn("the API accepts any TLS client: pass --listen-tls-ca or --listen-token-review to authenticate them", { listen: open });
  const stopReload =
    opts.tls && material
      ? watchTlsFiles(opts.tls.files, SERVER_FLAGS, material, {
          intervalMs: opts.tls.reloadMs ?? 2000,
          onChange: (m) => {
            for (const l of listeners) l.setTls?.(m);
            log.info("API certificate reloaded: new connections use it", { crt: opts.tls!.files.crt });
          },
          onError: (error) => log.warn("API certificate files changed but cannot be used: keeping the previous ones", { error }),
        })
      : () => {};
  const stopWarming = warmOwnNode(opts.brain, opts.defaultNodeName, api.cache);
  return {
    addresses,
    instanceID: api.instanceID,
    refused: auth.refused,
    stats: api.stats,
    close: async () => {
      stopReload();
      stopWarming();
      api.close();
      await Promise.all(listeners.map((l) => l.close()));
    },
  };
}
