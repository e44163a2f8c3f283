// `kpng get` and `kpng verify` ask the running kpng over its local API: one
// Connect-protocol call (binary protobuf over HTTP/1.1) on the unix
// socket or a loopback TCP port. Bun's fetch speaks to a unix socket itself:
// no HTTP/2 client and no Connect transport to load for one request.

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
import { checkApiAllowed, formatApiAddress, parseClientAddress, type ApiAddress } from "../api/server/address.ts";
import { KpngError } from "../errors.ts";

/** Where the running kpng answers; `--server` parsed. */
export function serverAddress(spec: string): ApiAddress {
  const addr = parseClientAddress(spec, "--server");
  // no TLS here: a brain off loopback is asked through its own node's socket
  checkApiAllowed(addr, false, spec, false);
  return addr;
}

/** The operator's next step when nothing answers: which flag serves the socket, which one points here. */
function unreachable(addr: ApiAddress, err: unknown): KpngError {
  const where = formatApiAddress(addr);
  const code = (err as { code?: string }).code ?? "";
  const why = /ENOENT|FailedToOpenSocket/.test(code + String(err))
    ? "no such socket"
    : /ECONNREFUSED|ConnectionRefused/.test(code + String(err))
      ? "connection refused"
      : String((err as Error).message ?? err);
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
async function callRpc(addr: ApiAddress, rpc: string, filter: Filter, stream: boolean, timeoutMs: number): Promise<Uint8Array[]> {
  const host = addr.kind === "unix" ? "localhost" : `${addr.host.includes(":") ? `[${addr.host}]` : addr.host}:${addr.port}`;
  const msg = toBinary(FilterSchema, filter);
  let res: Response;
  try {
    res = await fetch(`http://${host}/${Introspect.typeName}/${rpc}`, {
      method: "POST",
      headers: { "content-type": stream ? "application/connect+proto" : "application/proto", "connect-protocol-version": "1" },
      body: stream ? envelope(msg) : msg,
      signal: AbortSignal.timeout(timeoutMs),
      ...(addr.kind === "unix" ? { unix: addr.path } : {}),
    });
  } catch (err) {
    throw unreachable(addr, err);
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
}

/** The streamed messages as one reply: a client's view (and tests'). */
export function mergeReplies(replies: readonly ServicesReply[]): ServicesReply {
  const [head, ...rest] = replies;
  if (!head) return create(ServicesReplySchema);
  return { ...head, services: [...head.services, ...rest.flatMap((r) => r.services)] };
}

/** GetServices' streamed answer as one reply. */
export async function getServices(addr: ApiAddress, opts: CallOptions): Promise<ServicesReply> {
  const parts = await callRpc(addr, "GetServices", create(FilterSchema, opts.filter), true, opts.timeoutMs ?? 60_000);
  return mergeReplies(parts.map((p) => fromBinary(ServicesReplySchema, p)));
}

/** A verify reads the kernel: a big ruleset takes a while on a loaded node. */
export async function verify(addr: ApiAddress, opts: CallOptions): Promise<VerifyReply> {
  const [body] = await callRpc(addr, "Verify", create(FilterSchema, opts.filter), false, opts.timeoutMs ?? 120_000);
  return fromBinary(VerifyReplySchema, body);
}
