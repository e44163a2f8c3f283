// A minimal gRPC client (binary protobuf over HTTP/2) for kpng's two RPCs.
//
// Why not Connect's gRPC transport: it decodes and hands over each message
// through several async steps, a cost per op that a full state's change set
// pays on top of decoding the services and endpoints themselves (see docs/results/2026-11.md,
// the figures).
// Here response bytes are split into messages in one loop and the caller
// decodes only what it needs. Errors are GrpcErrors: the gRPC status code
// (the numbers Connect's Code uses) and a message printed as Connect prints
// its errors. Not Connect's own error class: importing @connectrpc/connect
// loads its whole module graph into a node agent's RSS for one class.

import * as http2 from "node:http2";
import * as net from "node:net";
import type { ApiAddress } from "../server/address.ts";
import type { TlsMaterial } from "../tls/files.ts";

/** The gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html), as Connect's Code numbers them. */
const Code = {
  Canceled: 1,
  Unknown: 2,
  InvalidArgument: 3,
  NotFound: 5,
  PermissionDenied: 7,
  Unimplemented: 12,
  Internal: 13,
  Unavailable: 14,
  Unauthenticated: 16,
} as const;
const codeNames = [
  "ok",
  "canceled",
  "unknown",
  "invalid_argument",
  "deadline_exceeded",
  "not_found",
  "already_exists",
  "permission_denied",
  "resource_exhausted",
  "failed_precondition",
  "aborted",
  "out_of_range",
  "unimplemented",
  "internal",
  "unavailable",
  "data_loss",
  "unauthenticated",
];

/** OpenSSL's and Node's codes for a peer certificate that does not verify (or a handshake that failed). */
const TLS_FAILURE = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_|SELF_SIGNED_|HOSTNAME_MISMATCH)/;

/** A failed call: its gRPC status code and message (`[unavailable] no answer to a ping within 3000 ms`). */
export class GrpcError extends Error {
  constructor(
    readonly rawMessage: string,
    readonly code: number,
    /** the TLS handshake failed: this client refused the server's certificate, or the server the client */
    readonly tls = false,
  ) {
    super(`[${codeNames[code] ?? "unknown"}] ${rawMessage}`);
    this.name = "GrpcError";
  }

  /** An abort reason (or any error) as a GrpcError with `code`. */
  static from(reason: unknown, code: number): GrpcError {
    if (reason instanceof GrpcError) return reason;
    // Bun reports a failed handshake as the pending stream's cancellation, caused by the TLS error.
    const tlsError = [reason, (reason as { cause?: unknown } | null)?.cause].find((e) => {
      const errno = (e as { code?: unknown } | null)?.code;
      return typeof errno === "string" && TLS_FAILURE.test(errno);
    }) as (Error & { code: string }) | undefined;
    if (tlsError) return new GrpcError(`TLS handshake failed (${tlsError.code}): ${tlsError.message}`, Code.Unavailable, true);
    return new GrpcError(reason instanceof Error ? reason.message : String(reason), code);
  }
}

/** The peer refused us (unauthenticated), or the handshake failed (one side refused the other's certificate). */
export const isRefusal = (err: unknown): boolean => err instanceof GrpcError && (err.code === Code.Unauthenticated || err.tls);

export interface GrpcConnection {
  /**
   * Calls `path` (e.g. `/localv1.Sets/Watch`); each request message is
   * written as it comes, the stream half-closes when `requests` ends.
   * Yields the response messages of each DATA chunk together.
   */
  call(path: string, requests: AsyncIterable<Uint8Array>, signal: AbortSignal): AsyncGenerator<Uint8Array[]>;
  close(): void;
}

const WINDOW = 16 << 20;

export interface ConnectOptions {
  /**
   * Liveness: fail the connection when it is not up within this many ms, or
   * an HTTP/2 PING goes unanswered this long (checked every quarter of it).
   * A brain whose host vanished sends no reset; without this a stream would
   * wait for TCP's own timeout, many minutes. Off by default.
   */
  keepaliveMs?: number;
  /**
   * TCP addresses only: TLS (ALPN h2) with this CA (else the system's roots)
   * and, for mutual TLS, this certificate and key. The server's certificate
   * must name the address's host.
   */
  tls?: TlsMaterial;
  /** sent as `authorization: Bearer TOKEN` with every call */
  token?: string;
}

export function connectGrpc(addr: ApiAddress, opts: ConnectOptions = {}): GrpcConnection {
  const secure = addr.kind === "tcp" && !!opts.tls;
  const authority =
    addr.kind === "unix"
      ? "http://localhost"
      : `${secure ? "https" : "http"}://${addr.host.includes(":") ? `[${addr.host}]` : addr.host}:${addr.port}`;
  // Large windows: a full state is megabytes, and 64 KiB windows would cost a round trip each.
  const settings = { initialWindowSize: WINDOW };
  const tlsOptions = secure
    ? { ...(opts.tls!.ca ? { ca: opts.tls!.ca } : {}), ...(opts.tls!.cert ? { cert: opts.tls!.cert, key: opts.tls!.key } : {}) }
    : {};
  const session = http2.connect(
    authority,
    addr.kind === "unix" ? { settings, createConnection: () => net.connect(addr.path) } : { settings, ...tlsOptions },
  );
  const headers: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  session.once("connect", () => session.setLocalWindowSize(WINDOW));
  // Errors reach each stream; without a listener an unreachable brain would crash the process.
  session.on("error", () => {});
  const stopKeepalive = opts.keepaliveMs ? keepalive(session, opts.keepaliveMs) : () => {};
  return {
    call: (path, requests, signal) => call(session, path, requests, signal, headers),
    close: () => {
      stopKeepalive();
      session.destroy();
    },
  };
}

function keepalive(session: http2.ClientHttp2Session, ms: number): () => void {
  const dead = (why: string) => session.destroy(new GrpcError(why, Code.Unavailable));
  const start = performance.now();
  let sentAt = 0; // 0 = no ping in flight
  // Ticks at a quarter of the limit: a ping goes out within ms/4 of the last
  // answer and its silence is noticed within ms/4 of the limit, so a dead
  // peer is left between ms and 1.5 ms after it stopped (timer jitter cannot
  // push a borderline check a whole period later).
  const timer = setInterval(() => {
    if (session.destroyed) return clearInterval(timer);
    const now = performance.now();
    if (session.connecting) return void (now - start >= ms && dead(`not connected within ${ms} ms`));
    if (sentAt) return void (now - sentAt >= ms && dead(`no answer to a ping within ${ms} ms`));
    sentAt = now;
    session.ping((err) => {
      sentAt = 0;
      if (err && !session.destroyed) dead(`ping failed: ${err.message}`);
    });
  }, ms / 4);
  timer.unref?.();
  return () => clearInterval(timer);
}

async function* call(
  session: http2.ClientHttp2Session,
  path: string,
  requests: AsyncIterable<Uint8Array>,
  signal: AbortSignal,
  headers: Record<string, string>,
): AsyncGenerator<Uint8Array[]> {
  if (signal.aborted) throw GrpcError.from(signal.reason, Code.Canceled);
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc+proto",
    te: "trailers",
    ...headers,
  });
  const q = new ChunkQueue();
  let status: GrpcError | null | undefined; // undefined = no trailers yet, null = OK
  const onAbort = () => stream.close(http2.constants.NGHTTP2_CANCEL);
  signal.addEventListener("abort", onAbort, { once: true });
  stream.on("response", (headers) => {
    const http = Number(headers[":status"]);
    const type = String(headers["content-type"] ?? "");
    if (http !== 200) status = new GrpcError(`HTTP status ${http}`, codeFromHttp(http));
    else if (!type.startsWith("application/grpc")) status = new GrpcError(`unexpected content-type "${type}"`, Code.Internal);
    else if (headers["grpc-status"] !== undefined) status = statusOf(headers); // trailers-only
  });
  stream.on("trailers", (trailers) => (status = statusOf(trailers)));
  stream.on("data", (chunk: Buffer) => q.push(chunk));
  stream.on("end", () => q.end());
  stream.on("error", (err) => q.fail(err));
  stream.on("close", () => q.end());
  void writeRequests(stream, requests, q);
  try {
    for await (const messages of q.messages()) yield messages;
    if (signal.aborted) throw GrpcError.from(signal.reason, Code.Canceled);
    if (status) throw status;
    if (status === undefined) throw new GrpcError("the stream ended without a gRPC status", Code.Unavailable);
  } finally {
    signal.removeEventListener("abort", onAbort);
    if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
  }
}

async function writeRequests(stream: http2.ClientHttp2Stream, requests: AsyncIterable<Uint8Array>, q: ChunkQueue) {
  try {
    for await (const msg of requests) {
      if (stream.destroyed) return;
      const frame = Buffer.allocUnsafe(5 + msg.length);
      frame[0] = 0;
      frame.writeUInt32BE(msg.length, 1);
      frame.set(msg, 5);
      stream.write(frame);
    }
    if (!stream.destroyed) stream.end();
  } catch (err) {
    q.fail(err);
  }
}

function statusOf(h: http2.IncomingHttpHeaders): GrpcError | null {
  const code = Number(h["grpc-status"] ?? Code.Unknown);
  if (code === 0) return null;
  let msg = String(h["grpc-message"] ?? "");
  try {
    msg = decodeURIComponent(msg);
  } catch {
    // keep the raw text: a server that does not percent-encode still says something useful
  }
  return new GrpcError(msg, Number.isInteger(code) && code > 0 && code < codeNames.length ? code : Code.Unknown);
}

/** https://github.com/grpc/grpc/blob/master/doc/http-grpc-status-mapping.md */
function codeFromHttp(status: number): number {
  return status === 400
    ? Code.Internal
    : status === 401
      ? Code.Unauthenticated
      : status === 403
        ? Code.PermissionDenied
        : status === 404
          ? Code.Unimplemented
          : [429, 502, 503, 504].includes(status)
            ? Code.Unavailable
            : Code.Unknown;
}

/** DATA chunks in, whole gRPC messages out (one array per chunk that completed some). */
class ChunkQueue {
  private buf: Buffer = Buffer.alloc(0);
  private ready: Uint8Array[] = [];
  private done = false;
  private error: unknown;
  private wake: (() => void) | null = null;

  push(chunk: Buffer) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    let pos = 0;
    while (this.buf.length - pos >= 5) {
      const len = this.buf.readUInt32BE(pos + 1);
      if (this.buf.length - pos < 5 + len) break;
      if (this.buf[pos] & 1) return this.fail(new GrpcError("compressed response messages are not supported", Code.Internal));
      this.ready.push(this.buf.subarray(pos + 5, pos + 5 + len));
      pos += 5 + len;
    }
    this.buf = this.buf.subarray(pos);
    this.notify();
  }

  end() {
    this.done = true;
    this.notify();
  }

  fail(err: unknown) {
    this.error ??= err;
    this.end();
  }

  private notify() {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  async *messages(): AsyncGenerator<Uint8Array[]> {
    for (;;) {
      if (this.ready.length) {
        const out = this.ready;
        this.ready = [];
        yield out;
      } else if (this.error) throw GrpcError.from(this.error, Code.Unavailable);
      else if (this.done) {
        if (this.buf.length) throw new GrpcError("protocol error: incomplete envelope", Code.Internal);
        return;
      } else await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }
}
