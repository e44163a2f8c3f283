// `kpng get` and `kpng verify` ask the running kpng over its local API: one
// Connect-protocol unary call (binary protobuf over HTTP/1.1) on the unix
// socket or a loopback TCP port. Bun's fetch speaks to a unix socket itself:
// no HTTP/2 client and no Connect transport to load for one request.

import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
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
    `no kpng answers on ${where} (${why}): start kpng with --listen=${where} (its API is off unless --listen is given; kpng serve listens on unix:///run/kpng.sock by default), or point --server at the address it listens on`,
  );
}

/** One unary call of the Introspect service: `rpc` is its name on the wire. */
async function unary<O extends DescMessage>(
  addr: ApiAddress,
  rpc: string,
  filter: Filter,
  output: O,
  timeoutMs: number,
): Promise<MessageShape<O>> {
  const host = addr.kind === "unix" ? "localhost" : `${addr.host.includes(":") ? `[${addr.host}]` : addr.host}:${addr.port}`;
  let res: Response;
  try {
    res = await fetch(`http://${host}/${Introspect.typeName}/${rpc}`, {
      method: "POST",
      headers: { "content-type": "application/proto", "connect-protocol-version": "1" },
      body: toBinary(FilterSchema, filter),
      signal: AbortSignal.timeout(timeoutMs),
      ...(addr.kind === "unix" ? { unix: addr.path } : {}),
    });
  } catch (err) {
    throw unreachable(addr, err);
  }
  const body = new Uint8Array(await res.arrayBuffer());
  if (res.status === 200) return fromBinary(output, body);
  throw new KpngError("unavailable", refusal(addr, res.status, body));
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

export const getServices = (addr: ApiAddress, opts: CallOptions): Promise<ServicesReply> =>
  unary(addr, "GetServices", create(FilterSchema, opts.filter), ServicesReplySchema, opts.timeoutMs ?? 30_000);

/** A verify reads the kernel: a big ruleset takes a while on a loaded node. */
export const verify = (addr: ApiAddress, opts: CallOptions): Promise<VerifyReply> =>
  unary(addr, "Verify", create(FilterSchema, opts.filter), VerifyReplySchema, opts.timeoutMs ?? 120_000);
