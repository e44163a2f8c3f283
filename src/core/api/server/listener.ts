// One listener serving gRPC (HTTP/2 prior knowledge, h2c) and the Connect
// protocol over HTTP/1.1 on the same socket; over TLS when given a
// certificate, where ALPN picks the protocol (h2 for gRPC clients, as Go's
// grpc and `buf curl` ask for it) and a client that offers none is sniffed.
//
// Why a sniffer instead of `http2.createServer({ allowHTTP1: true })`: Bun
// (1.4.5) ignores allowHTTP1 and answers an HTTP/1.1 request with an HTTP/2
// GOAWAY frame (curl: "Received HTTP/0.9 when not allowed"). So a plain
// net.Server reads the first bytes of each connection and hands the socket to
// an http2 or an http1 server: the HTTP/2 client preface ("PRI * HTTP/2.0")
// cannot start an HTTP/1 request.

import { lstat, unlink } from "node:fs/promises";
import { chmodSync, statSync } from "node:fs";
import * as http from "node:http";
import * as http2 from "node:http2";
import * as net from "node:net";
import * as tls from "node:tls";
import { KpngError } from "../../errors.ts";
import type { TlsMaterial } from "../tls/files.ts";
import type { ApiAddress } from "./address.ts";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

type Handler = (req: http.IncomingMessage | http2.Http2ServerRequest, res: http.ServerResponse | http2.Http2ServerResponse) => void;

/**
 * `serve`, answering 400 where it throws: Connect throws synchronously on
 * some malformed requests (an HTTP/1.1 request without Host), which would
 * otherwise leave the response open. `onError` hears of each.
 */
export function answering400<H extends Handler>(serve: H, onError?: (url: string | undefined, err: unknown) => void): H {
  return ((req, res) => {
    try {
      serve(req, res);
    } catch (err) {
      onError?.(req.url, err);
      // both response kinds take writeHead(status); their overloads differ, so TypeScript sees no common one
      if (!res.headersSent) (res as http.ServerResponse).writeHead(400);
      res.end();
    }
  }) as H;
}

export interface Listener {
  /** the bound address (a tcp port 0 resolved to the real port) */
  readonly address: ApiAddress;
  /** TLS listeners: new connections use this certificate, key and client CA; open ones keep theirs */
  setTls?(m: TlsMaterial): void;
  close(): Promise<void>;
}

/**
 * How long a new connection has to show what it speaks (the TLS handshake,
 * then the first bytes the sniffer reads) before it is closed: grpc-go's
 * default connection timeout. Without it a client that connects and sends
 * nothing holds a socket, and the brain's file descriptors, for good.
 */
export const HANDSHAKE_MS = 120_000;

export interface ListenTls {
  material: TlsMaterial;
  /** a handshake that failed (ECONNRESET before any byte: a TCP probe, or a client that does not trust us) */
  onHandshakeError(err: NodeJS.ErrnoException, peer: string | undefined): void;
}

/**
 * The client certificate is asked for when there is a client CA, but not
 * required by the handshake: the request is refused afterwards with a reason
 * the client can read (see auth.ts).
 */
const secureOptions = (m: TlsMaterial): tls.TlsOptions => ({
  cert: m.cert,
  key: m.key,
  ...(m.ca ? { ca: m.ca, requestCert: true, rejectUnauthorized: false } : {}),
});

/** Unix sockets are created group-accessible only: the API reveals cluster topology. */
const SOCKET_MODE = 0o660;

/** Request headers (HTTP/1.1 and HTTP/2 alike): kpng's requests carry a few hundred bytes, a bearer token ~1 KB. */
export const MAX_HEADER_LIST = 16 << 10;

export interface ListenOptions {
  tls?: ListenTls;
  handshakeMs?: number;
  /** what errors name the address by (default "flag --listen": the run mode's default socket is no flag) */
  what?: string;
}

export async function listen(addr: ApiAddress, handler: Handler, opts: ListenOptions = {}): Promise<Listener> {
  const handshakeMs = opts.handshakeMs ?? HANDSHAKE_MS;
  const what = opts.what ?? "flag --listen";
  const h2 = http2.createServer(
    { settings: { maxHeaderListSize: MAX_HEADER_LIST } },
    handler as (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void,
  );
  const h1 = http.createServer({ maxHeaderSize: MAX_HEADER_LIST }, handler as http.RequestListener);
  // A malformed frame or a broken connection ends that session, never the server.
  h2.on("sessionError", () => {});
  h1.on("clientError", (_err, sock) => sock.destroy());
  const sockets = new Set<net.Socket>();
  const track = (sock: net.Socket) => {
    sockets.add(sock);
    sock.once("close", () => sockets.delete(sock));
    sock.on("error", () => sock.destroy());
  };
  const route = (sock: net.Socket) => sniff(sock, handshakeMs, (isH2) => (isH2 ? h2 : h1).emit("connection", sock));
  const useTls = opts.tls && addr.kind === "tcp" ? opts.tls : undefined;
  let server: net.Server;
  if (useTls) {
    const ts = tls.createServer(
      { ...secureOptions(useTls.material), ALPNProtocols: ["h2", "http/1.1"], handshakeTimeout: handshakeMs },
      (sock) => {
        track(sock);
        if (sock.alpnProtocol === "h2") h2.emit("connection", sock);
        else if (sock.alpnProtocol === "http/1.1") h1.emit("connection", sock);
        else route(sock);
      },
    );
    ts.on("connection", track);
    ts.on("tlsClientError", (err, sock) => {
      useTls.onHandshakeError(err, sock.remoteAddress);
      sock.destroy(); // Bun (1.4.5) leaves the socket open after some handshake errors
    });
    server = ts;
  } else
    server = net.createServer((sock) => {
      track(sock);
      route(sock);
    });
  if (addr.kind === "unix") await prepareSocketPath(addr.path, what);
  await new Promise<void>((resolve, reject) => {
    server.once("error", (err: NodeJS.ErrnoException) => reject(listenError(addr, err, what)));
    if (addr.kind === "unix") server.listen(addr.path, resolve);
    else server.listen(addr.port, addr.host, resolve);
  });
  server.on("error", () => {});
  let bound = addr;
  let inode = 0;
  if (addr.kind === "unix") {
    chmodSync(addr.path, SOCKET_MODE);
    inode = statSync(addr.path).ino;
  } else bound = { ...addr, port: (server.address() as net.AddressInfo).port };
  return {
    address: bound,
    ...(useTls ? { setTls: (m: TlsMaterial) => (server as tls.Server).setSecureContext(secureOptions(m)) } : {}),
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Long polls and watches hold connections open; end them so close() returns.
      for (const s of sockets) s.destroy();
      await closed;
      // Only our own socket: a newer brain may already have replaced it.
      if (addr.kind === "unix" && (await lstat(addr.path).catch(() => null))?.ino === inode) await unlink(addr.path).catch(() => {});
    },
  };
}

/** Reads until the bytes seen either are a prefix of the HTTP/2 preface or are not; closes the socket if that takes over `ms`. */
function sniff(sock: net.Socket, ms: number, route: (isH2: boolean) => void) {
  let seen: Buffer = Buffer.alloc(0);
  const deadline = setTimeout(() => sock.destroy(), ms);
  sock.once("close", () => clearTimeout(deadline));
  const onReadable = () => {
    const chunk = sock.read() as Buffer | null;
    if (chunk === null) return;
    seen = seen.length ? Buffer.concat([seen, chunk]) : chunk;
    const n = Math.min(seen.length, PREFACE.length);
    const matches = seen.subarray(0, n).equals(PREFACE.subarray(0, n));
    if (matches && n < PREFACE.length) return;
    sock.off("readable", onReadable);
    clearTimeout(deadline);
    sock.unshift(seen);
    route(matches);
  };
  sock.on("readable", onReadable);
}

/**
 * A leftover socket from a crashed run is removed; anything else at the path
 * (a file, a directory, a live server) is an error, never deleted.
 */
async function prepareSocketPath(path: string, what: string): Promise<void> {
  const st = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === "ENOENT") return null;
    throw new KpngError("invalid_argument", `${what}: unix://${path}: ${err.code ?? err.message}`);
  });
  if (!st) return;
  if (!st.isSocket())
    throw new KpngError("invalid_argument", `${what}: unix://${path}: exists and is not a socket (refusing to replace it)`);
  const alive = await new Promise<boolean>((resolve) => {
    const c = net.connect(path);
    c.once("connect", () => {
      c.destroy();
      resolve(true);
    });
    c.once("error", () => resolve(false));
  });
  if (alive) throw new KpngError("failed_precondition", `${what}: unix://${path}: another process is serving on this socket`);
  // Two kpngs starting together may both find the dead socket: each removes only the file it
  // probed, not a new socket the other has bound since (another inode), and the second bind
  // then fails (EADDRINUSE). What remains is the instant between this lstat and the unlink.
  if ((await lstat(path).catch(() => null))?.ino !== st.ino) return;
  await unlink(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== "ENOENT") throw new KpngError("invalid_argument", `${what}: unix://${path}: ${err.code ?? err.message}`);
  });
}

function listenError(addr: ApiAddress, err: NodeJS.ErrnoException, what: string): KpngError {
  const where = addr.kind === "unix" ? `unix://${addr.path}` : `tcp://${addr.host}:${addr.port}`;
  const code = err.code === "EADDRINUSE" ? "failed_precondition" : "invalid_argument";
  return new KpngError(code, `${what}: ${where}: cannot listen: ${err.code ?? err.message}`);
}
