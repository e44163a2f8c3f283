// `kpng get` and `kpng verify` ask the running kpng over its local API: one
// Connect-protocol call (binary protobuf over HTTP/1.1) on the unix
// socket or a TCP port (over TLS with the `--tls-*` flags, as a node agent's
// `--api`). Bun's fetch speaks to a unix socket itself: no HTTP/2 client and
// no Connect transport to load for one request.

import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import {
  FilterSchema,
  Introspect,
  ServicesReplySchema,
  VerifyReplySchema,
  type Filter,
  type ServicesReply,
  type VerifyReply,
} from "../../gen/introspectv1/introspect_pb.ts";
import type { ConnectOptions } from "../api/client/grpc.ts";
import { crossesNetwork, formatApiAddress, parseClientAddress, type ApiAddress } from "../api/server/address.ts";
import { invalid, KpngError } from "../errors.ts";

/** What a call carries to a TCP server over TLS: `clientCredentials()` of the `--tls-*` flags. */
export type Credentials = Pick<ConnectOptions, "tls" | "token">;

/** Where the running kpng answers; `--server` parsed. Off loopback only over TLS: the answer is the node's Services and endpoints. */
export function serverAddress(spec: string, tls = false): ApiAddress {
  const addr = parseClientAddress(spec, "--server");
  if (crossesNetwork(addr) && !tls)
    throw invalid(
      `flag --server: "${spec}" is not a loopback address: connect with TLS (--tls-ca, and --tls-crt/--tls-key or --token-file to authenticate), or ask through the node's own socket`,
    );
  return addr;
}

/**
 * The operator's next step when nothing answers: which flag serves the socket, which one points here.
 * A connection made and then closed, or a certificate refused, is a kpng there speaking TLS: the `--tls-*` flags are the step.
 */
function unreachable(addr: ApiAddress, err: unknown, tls: boolean): KpngError {
  const where = formatApiAddress(addr);
  const code = (err as { code?: string }).code ?? "";
  const text = code + String(err);
  const message = String((err as Error).message ?? err);
  if (addr.kind === "tcp" && tls && /CERT|SELF_SIGNED|certificate|TLS|SSL/i.test(text))
    return new KpngError(
      "unavailable",
      `${where}: TLS handshake failed (${message}): --tls-ca must name the CA that signed its --listen-tls-crt, which must name ${addr.host}`,
    );
  if (addr.kind === "tcp" && !tls && /ECONNRESET/.test(text))
    return new KpngError(
      "unavailable",
      `${where} closed the connection (${code}): if kpng serves it with TLS (--listen-tls-crt), connect with --tls-ca (and --tls-crt/--tls-key or --token-file)`,
    );
  const why = /ENOENT|FailedToOpenSocket/.test(text)
    ? "no such socket"
    : /ECONNREFUSED|ConnectionRefused/.test(text)
      ? "connection refused"
      : message;
  return new KpngError(
    "unavailable",
    `no kpng answers on ${where} (${why}): start kpng with --listen=${where} (a node's kpng serves it by default, kpng serve too, unless --listen names other addresses), or point --server at the address it listens on`,
  );
}

/**
 * One call of the Introspect service in the Connect protocol over HTTP/1.1:
 * `stream` = a server-streaming method, whose request and answer are
 * enveloped (a flags byte, a 4-byte big-endian length, the message; the
 * last envelope, flag 0x02, is the end of the stream as JSON with its error).
 */
async function callRpc(
  addr: ApiAddress,
  rpc: string,
  filter: Filter,
  stream: boolean,
  opts: { timeoutMs: number; credentials?: Credentials },
): Promise<Uint8Array[]> {
  const host = addr.kind === "unix" ? "localhost" : `${addr.host.includes(":") ? `[${addr.host}]` : addr.host}:${addr.port}`;
  // TLS on TCP only, as connectGrpc: kpng serves its unix socket without TLS
  const tls = addr.kind === "tcp" ? opts.credentials?.tls : undefined;
  const token = tls && opts.credentials?.token;
  const msg = toBinary(FilterSchema, filter);
  let res: Response;
  try {
    res = await fetch(`${tls ? "https" : "http"}://${host}/${Introspect.typeName}/${rpc}`, {
      method: "POST",
      headers: {
        "content-type": stream ? "application/connect+proto" : "application/proto",
        "connect-protocol-version": "1",
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: stream ? envelope(msg) : msg,
      signal: AbortSignal.timeout(opts.timeoutMs),
      ...(addr.kind === "unix" ? { unix: addr.path } : {}),
      ...(tls ? { tls: { ca: tls.ca, cert: tls.cert, key: tls.key } } : {}),
    });
  } catch (err) {
    throw unreachable(addr, err, !!tls);
  }
  const body = new Uint8Array(await res.arrayBuffer());
  if (res.status !== 200) throw new KpngError("unavailable", refusal(addr, res.status, body));
  if (!stream) return [body];
  const out: Uint8Array[] = [];
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  for (let at = 0; at + 5 <= body.length; ) {
    const flags = body[at];
    const len = view.getUint32(at + 1);
    const part = body.subarray(at + 5, at + 5 + len);
    at += 5 + len;
    if (flags & 0x02) {
      const end = JSON.parse(new TextDecoder().decode(part) || "{}") as { error?: { code?: string; message?: string } };
      if (end.error)
        throw new KpngError("unavailable", `${formatApiAddress(addr)} answered ${end.error.code ?? "unknown"}: ${end.error.message ?? ""}`);
      return out;
    }
    out.push(part);
  }
  throw new KpngError("unavailable", `${formatApiAddress(addr)} ended the answer early`);
}

function envelope(msg: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + msg.length);
  new DataView(out.buffer).setUint32(1, msg.length);
  out.set(msg, 5);
  return out;
}

/** Connect's error body ({"code", "message"}) as one line */
function refusal(addr: ApiAddress, status: number, body: Uint8Array): string {
  try {
    const e = JSON.parse(new TextDecoder().decode(body)) as { code?: string; message?: string };
    if (e.code === "unimplemented")
      return `the kpng on ${formatApiAddress(addr)} does not serve introspection (an older kpng): ${e.message ?? ""}`;
    return `${formatApiAddress(addr)} answered ${e.code ?? status}: ${e.message ?? ""}`;
  } catch {
    return `${formatApiAddress(addr)} answered HTTP ${status}`;
  }
}

export interface CallOptions {
  filter: MessageInitShape<typeof FilterSchema>;
  timeoutMs?: number;
  credentials?: Credentials;
}

/** The streamed messages as one reply: a client's view (and tests'). */
export function mergeReplies(replies: readonly ServicesReply[]): ServicesReply {
  const [head, ...rest] = replies;
  if (!head) return create(ServicesReplySchema);
  return { ...head, services: [...head.services, ...rest.flatMap((r) => r.services)] };
}

/** GetServices' streamed answer as one reply. */
export async function getServices(addr: ApiAddress, opts: CallOptions): Promise<ServicesReply> {
  const parts = await callRpc(addr, "GetServices", create(FilterSchema, opts.filter), true, {
    timeoutMs: opts.timeoutMs ?? 60_000,
    credentials: opts.credentials,
  });
  return mergeReplies(parts.map((p) => fromBinary(ServicesReplySchema, p)));
}

/** A verify reads the kernel: a big ruleset takes a while on a loaded node. */
export async function verify(addr: ApiAddress, opts: CallOptions): Promise<VerifyReply> {
  const [body] = await callRpc(addr, "Verify", create(FilterSchema, opts.filter), false, {
    timeoutMs: opts.timeoutMs ?? 120_000,
    credentials: opts.credentials,
  });
  return fromBinary(VerifyReplySchema, body);
}
