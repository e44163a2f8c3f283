// gRPC with binary protobuf over HTTP/2, the three RPCs served directly; every
// other protocol and codec (Connect over HTTP/1.1 or HTTP/2, gRPC-Web,
// gRPC+JSON) goes through Connect's handler.
//
// Why not Connect for this too: Connect writes and awaits each streamed
// message on its own, and Bun's (1.4.5) http2 server turns each write into a
// DATA frame and a round of the event loop, for each of a full state's
// OpItems (one per service and endpoint; see docs/results/2026-11.md). Here a
// whole change set is
// framed into one buffer from cached bytes and written at once. This is the
// path kpng's Go clients, `buf curl --protocol grpc` and kpng's own client
// library use.

import { fromBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { GlobalWatchReqSchema, type GlobalWatchReq } from "../../../gen/globalv1/global_pb.ts";
import { NextFilterSchema, WatchReqSchema, type NextFilter, type WatchReq } from "../../../gen/localv1/services_pb.ts";
import { frameChangeSet } from "./global-watch.ts";
import type { WireOp } from "../../wire/ops.ts";
import { frameMessages, frameOps } from "./wire.ts";
import { requestMessages, type RequestBody } from "./request-messages.ts";
import type { Slots } from "./slots.ts";

export interface FastRoutes {
  watch(reqs: AsyncIterable<WatchReq>, signal: AbortSignal): AsyncIterable<WireOp[]>;
  globalWatch(reqs: AsyncIterable<GlobalWatchReq>, signal: AbortSignal): AsyncIterable<WireOp[]>;
  /** the encoded NextItems answering one call */
  next(filter: NextFilter, signal: AbortSignal): Promise<Uint8Array[]>;
  onError(rpc: string, err: ConnectError, signal: AbortSignal): void;
  /**
   * A stream whose client has read nothing of a piece for this long is
   * dropped (its memory freed); the client resyncs when it reconnects.
   */
  stuckMs: number;
  /** a stream was dropped for that */
  onStuck(rpc: string): void;
  /** turns for writing a change set bigger than one piece (a whole model), shared by every stream */
  bigWrites: Slots;
}

/** What is used of Node's http and http2 compatibility request/response objects. */
interface Req extends RequestBody {
  readonly url?: string;
  readonly method?: string;
  readonly httpVersionMajor: number;
  readonly headers: Record<string, string | string[] | undefined>;
}
interface Res {
  /** HTTP/2 responses: the stream, reset to drop it */
  readonly stream?: { close(code?: number): void };
  destroy?(): void;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
  writeHead(status: number, headers: Record<string, string>): unknown;
  write(chunk: Uint8Array): boolean;
  addTrailers(headers: Record<string, string>): void;
  end(): unknown;
  once(event: "close" | "drain", fn: () => void): unknown;
  off(event: "close" | "drain", fn: () => void): unknown;
}

type Rpc = "Watch" | "Next" | "GlobalWatch";
const PATHS: Record<string, Rpc> = {
  "/localv1.Sets/Watch": "Watch",
  "/localv1.Endpoints/Next": "Next",
  "/globalv1.Sets/Watch": "GlobalWatch",
};
const CONTENT_TYPES = new Set(["application/grpc", "application/grpc+proto"]);
/** a request message is a node name: anything big is not one of ours */
export const MAX_REQUEST_MESSAGE = 1 << 20;
/** RST_STREAM CANCEL */
const CANCEL = 8;

/** Not a ConnectError: ConnectError's instanceof accepts any ConnectError-shaped object. */
class Stuck extends Error {}

/** Serves the request when it is binary gRPC for one of our RPCs; false = not ours. */
export function serveGrpcFast(req: Req, res: Res, routes: FastRoutes): boolean {
  const rpc = PATHS[req.url ?? ""];
  const contentType = String(req.headers["content-type"] ?? "");
  if (!rpc || req.httpVersionMajor !== 2 || req.method !== "POST" || !CONTENT_TYPES.has(contentType)) return false;
  void serve(rpc, contentType, req, res, routes);
  return true;
}

async function serve(rpc: Rpc, contentType: string, req: Req, res: Res, routes: FastRoutes) {
  const ac = new AbortController();
  res.once("close", () => ac.abort(new ConnectError("the client closed the stream", Code.Canceled)));
  res.writeHead(200, { "content-type": contentType, "grpc-accept-encoding": "identity" });
  try {
    const enc = req.headers["grpc-encoding"];
    if (enc && enc !== "identity")
      throw new ConnectError(`grpc-encoding "${String(enc)}" is not supported (use identity)`, Code.Unimplemented);
    const messages = requestMessages(req, MAX_REQUEST_MESSAGE);
    if (rpc === "Watch" || rpc === "GlobalWatch") {
      // Not `for await`: Bun (1.4.5) keeps a for-await loop's last value alive while it
      // waits for the next, so every idle watcher held its last change set and its
      // framed bytes (a whole state's worth each after a full state).
      const batches = (
        rpc === "Watch"
          ? routes.watch(decodeAll(WatchReqSchema, messages), ac.signal)
          : routes.globalWatch(decodeAll(GlobalWatchReqSchema, messages), ac.signal)
      )[Symbol.asyncIterator]();
      try {
        for (;;) {
          const r = await batches.next();
          if (r.done) break;
          await write(res, frameChangeSet(r.value, frameOps), routes);
        }
      } finally {
        await batches.return?.(); // unsubscribes the stream from its view
      }
    } else {
      let filter: NextFilter | undefined;
      for await (const filterMsg of decodeAll(NextFilterSchema, messages)) {
        if (filter) throw new ConnectError("Next takes exactly one NextFilter", Code.InvalidArgument);
        filter = filterMsg;
      }
      if (!filter) throw new ConnectError("Next takes exactly one NextFilter, got none", Code.InvalidArgument);
      await write(res, frameMessages(await routes.next(filter, ac.signal)), routes);
    }
    finish(res, 0, ""); // OK
  } catch (err) {
    if (err instanceof Stuck) {
      // Trailers would queue behind the bytes it does not read: reset the stream instead.
      routes.onStuck(rpc);
      if (res.stream) res.stream.close(CANCEL);
      else res.destroy?.();
      return;
    }
    const ce = ConnectError.from(ac.signal.aborted ? ac.signal.reason : err, Code.Internal);
    routes.onError(rpc, ce, ac.signal);
    finish(res, ce.code, ce.rawMessage);
  }
}

function finish(res: Res, code: number, message: string) {
  if (res.destroyed || res.writableEnded) return;
  const trailers: Record<string, string> = { "grpc-status": String(code) };
  if (message) trailers["grpc-message"] = encodeURIComponent(message);
  res.addTrailers(trailers);
  res.end();
}

/**
 * Big buffers go out in pieces, each after the previous drained: Bun's
 * (1.4.5) http2 response keeps its own copy of whatever is queued, so one
 * write of a whole cluster-wide model per stream (a buffer shared by every
 * global stream) cost a model's size per stream starting at once; pieces
 * bound it to about one piece per stream. A client that stops reading (a
 * stuck node agent) therefore holds at most a piece here, and only for
 * `stuckMs`.
 *
 * And a limited number of streams write theirs at once: each piece is
 * encrypted and framed on the event loop, so thousands of agents coming
 * back together (a brain failover) made its turns long enough for agents
 * to miss its pings (they give up on a brain after 3 s) and fail over
 * again, and every waiting piece was memory. In turns, the others wait
 * their turn at no cost, and a stream's small change sets never wait.
 */
const PIECE = 256 << 10;
async function write(res: Res, chunk: Buffer, routes: Pick<FastRoutes, "stuckMs" | "bigWrites">): Promise<void> {
  if (chunk.length <= PIECE) return writePiece(res, chunk, routes.stuckMs);
  const done = await routes.bigWrites.take();
  try {
    for (let pos = 0; pos < chunk.length; pos += PIECE) await writePiece(res, chunk.subarray(pos, pos + PIECE), routes.stuckMs);
  } finally {
    done();
  }
}

function writePiece(res: Res, chunk: Buffer, stuckMs: number): Promise<void> {
  if (res.destroyed) return Promise.reject(new ConnectError("the client closed the stream", Code.Canceled));
  if (res.write(chunk)) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const stop = () => {
      clearTimeout(timer);
      res.off("drain", done);
      res.off("close", done);
    };
    const timer = setTimeout(() => {
      stop();
      reject(new Stuck(`the client read nothing for ${stuckMs} ms: stream dropped`));
    }, stuckMs);
    const done = () => {
      stop();
      resolve();
    };
    res.once("drain", done);
    res.once("close", done);
  });
}

async function* decodeAll<D extends DescMessage>(schema: D, messages: AsyncIterable<Uint8Array>): AsyncGenerator<MessageShape<D>> {
  for await (const m of messages) {
    let msg: MessageShape<D>;
    try {
      msg = fromBinary(schema, m);
    } catch (err) {
      throw new ConnectError(`cannot decode ${schema.typeName}: ${err instanceof Error ? err.message : String(err)}`, Code.InvalidArgument);
    }
    yield msg;
  }
}
