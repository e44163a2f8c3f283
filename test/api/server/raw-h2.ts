// HTTP/2 written by hand over a socket, for what no well-behaved client
// does: never reading (no WINDOW_UPDATE: the stuck agent), malformed frames,
// garbage after the preface. HPACK only as literal fields without indexing
// (RFC 7541 6.2.2), which every decoder must accept.

import * as net from "node:net";
import * as tls from "node:tls";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";

export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
export const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8 } as const;
export const FLAG = { END_STREAM: 1, ACK: 1, END_HEADERS: 4 } as const;

export function frame(
  type: number,
  flags: number,
  stream: number,
  payload: Uint8Array = new Uint8Array(0),
  length = payload.length,
): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream & 0x7fffffff, 5);
  return Buffer.concat([head, payload]);
}

function hpackLength(n: number): Buffer {
  // 7-bit prefix integer, no Huffman
  if (n < 127) return Buffer.from([n]);
  const out = [127];
  n -= 127;
  while (n >= 128) {
    out.push((n % 128) + 128);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return Buffer.from(out);
}

/** A header block of literal fields without indexing, new names. */
export function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(headers))
    parts.push(Buffer.from([0]), hpackLength(k.length), Buffer.from(k), hpackLength(Buffer.byteLength(v)), Buffer.from(v));
  return Buffer.concat(parts);
}

export function grpcRequestHeaders(path: string, authority = "localhost"): Record<string, string> {
  return {
    ":method": "POST",
    ":scheme": "http",
    ":path": path,
    ":authority": authority,
    "content-type": "application/grpc",
    te: "trailers",
  };
}

/** One gRPC message, length-prefixed. */
export function grpcMessage(bytes: Uint8Array, declaredLength = bytes.length): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(declaredLength, 1);
  return Buffer.concat([head, bytes]);
}

export interface RawConnection {
  socket: net.Socket;
  /** frames received so far */
  frames: Array<{ type: number; flags: number; stream: number; payload: Buffer }>;
  /** DATA bytes received per stream */
  dataBytes(stream: number): number;
  write(b: Uint8Array): void;
  /** resolves when a frame matching `pred` has arrived (or the socket closed: false) */
  until(pred: (f: RawConnection["frames"][number]) => boolean, timeoutMs?: number): Promise<boolean>;
  readonly closed: boolean;
  close(): void;
}

/** Connects (over TLS with ALPN h2 when `tlsOptions` is given) and reads frames; sends the preface and empty SETTINGS unless `preface` is false. */
export async function rawH2(
  port: number,
  opts: { tls?: tls.ConnectionOptions; preface?: boolean; settings?: Buffer } = {},
): Promise<RawConnection> {
  const socket: net.Socket = opts.tls
    ? tls.connect({ host: "127.0.0.1", port, ALPNProtocols: ["h2"], ...opts.tls })
    : net.connect(port, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    socket.once(opts.tls ? "secureConnect" : "connect", () => resolve());
    socket.once("error", reject);
  });
  socket.on("error", () => {});
  const frames: RawConnection["frames"] = [];
  let buf = Buffer.alloc(0);
  let closed = false;
  const waiters = new Set<() => void>();
  const notify = () => waiters.forEach((w) => w());
  socket.on("data", (chunk: Buffer) => {
    buf = Buffer.concat([buf, chunk]);
    while (buf.length >= 9) {
      const len = buf.readUIntBE(0, 3);
      if (buf.length < 9 + len) break;
      frames.push({ type: buf[3], flags: buf[4], stream: buf.readUInt32BE(5) & 0x7fffffff, payload: buf.subarray(9, 9 + len) });
      buf = buf.subarray(9 + len);
    }
    notify();
  });
  socket.on("close", () => {
    closed = true;
    notify();
  });
  if (opts.preface !== false) socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0, opts.settings)]));
  const conn: RawConnection = {
    socket,
    frames,
    dataBytes: (stream) => frames.filter((f) => f.type === FRAME.DATA && f.stream === stream).reduce((n, f) => n + f.payload.length, 0),
    write: (b) => void socket.write(b),
    // bounded by the frame awaited, up to a wait a loaded machine meets
    until(pred, timeoutMs = LOADED_WAIT_MS) {
      return new Promise((resolve) => {
        const check = () => {
          if (frames.some(pred)) finish(true);
          else if (closed) finish(false);
        };
        const timer = setTimeout(() => finish(false), timeoutMs);
        const finish = (v: boolean) => {
          clearTimeout(timer);
          waiters.delete(check);
          resolve(v);
        };
        waiters.add(check);
        check();
      });
    },
    get closed() {
      return closed;
    },
    close: () => socket.destroy(),
  };
  return conn;
}
