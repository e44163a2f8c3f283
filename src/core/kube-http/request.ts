// Requests to the API server with the kubeconfig's TLS and credentials
// (sources/kubeconfig.ts), on node:http(s), which honours the CA, the server
// name and the client certificate under both Bun and Node, compiled or not.
//
// A leaf room: the sources, the event recorder and the API server's token
// review all talk to the API server through it, and it imports none of
// them. Reading a protobuf answer needs the Kubernetes object decoders
// (sources/protobuf/), so whoever asks for protobuf hands a reader in.

import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import type { KubeAccess } from "./access.ts";
import { encodingOf } from "./content.ts";

export interface KubeGet {
  (path: string, query: Record<string, string | undefined>, signal: AbortSignal): Promise<IncomingMessage>;
  /** closes the idle connections kept for the next request */
  close(): void;
}

export interface KubeRequestOptions {
  method?: "GET" | "POST";
  path: string;
  query?: Record<string, string | undefined>;
  /** sent as JSON */
  body?: unknown;
  /** the Accept header; default JSON */
  accept?: string;
  signal?: AbortSignal;
}

export type KubeRequest = (opts: KubeRequestOptions) => Promise<IncomingMessage>;

/** Reads a protobuf answer's body (the `k8s\0` envelope) into the object it holds: sources/protobuf/envelope.ts's protobufObject. */
export type ProtobufReader = (body: Buffer) => Record<string, unknown>;

export class HttpStatusError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A request function for `access`. Credentials are fetched per request:
 * rotated tokens, expiring exec credentials. With `agent`, connections are
 * kept for the next request: without, each request pays a TCP and TLS
 * handshake. Each request is reported to `access.observe` (rest_client_*).
 */
export function kubeRequest(access: KubeAccess, agent?: HttpAgent): KubeRequest {
  const send = sendRequest(access, agent);
  if (!access.observe) return send;
  const observe = access.observe;
  const host = serverHost(access.server);
  return async (opts) => {
    const method = opts.method ?? "GET";
    const t0 = performance.now();
    // client-go counts a watch but does not time it (Request.Watch); any other request is timed to the end of its answer.
    const watch = !!opts.query?.watch;
    const report = (code: string) => observe.request({ method, host, code, seconds: watch ? undefined : (performance.now() - t0) / 1000 });
    let res: IncomingMessage;
    try {
      res = await send(opts);
    } catch (err) {
      report("<error>");
      throw err;
    }
    const code = String(res.statusCode ?? 0);
    if (watch) report(code);
    else res.once("close", () => report(code));
    return res;
  };
}

/** client-go's `host` label: Go's url.Host, the host and port as written (a WHATWG URL drops a default port). */
export const serverHost = (server: string) => server.replace(/^[a-z][a-z0-9+.-]*:\/\//i, "").split("/")[0];

function sendRequest(access: KubeAccess, agent?: HttpAgent): KubeRequest {
  const { server, tls } = access;
  return async ({ method = "GET", path, query = {}, body, signal, accept = "application/json" }) => {
    const url = new URL(server + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") url.searchParams.set(k, v);
    const creds = await access.credentials();
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string | number> = { Accept: accept };
    if (creds.authorization) headers.Authorization = creds.authorization;
    if (payload !== undefined) Object.assign(headers, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) });
    const secure = url.protocol === "https:";
    const tlsOptions = secure
      ? {
          ...(tls.ca ? { ca: tls.ca } : {}),
          ...(tls.servername ? { servername: tls.servername } : {}),
          rejectUnauthorized: !tls.insecure,
          ...(creds.cert ? { cert: creds.cert, key: creds.key } : {}),
        }
      : {};
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = (secure ? httpsRequest : httpRequest)(url, { ...tlsOptions, agent, method, headers, signal }, resolve);
      req.on("error", reject);
      req.end(payload);
    });
    if (res.statusCode === 401) creds.refused();
    return res;
  };
}

/**
 * A GET function for `access`, keeping its connections: a list of 10,000
 * objects is 20 pages, and a handshake a page (each next page is asked for
 * while the last one is read, so a fresh connection each time) was a
 * visible share of a big start-up (see docs/results/2026-11.md).
 */
export function kubeGet(access: KubeAccess, accept?: string): KubeGet {
  const agent = access.server.startsWith("https:") ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  const send = kubeRequest(access, agent);
  return Object.assign(
    (path: string, query: Record<string, string | undefined>, signal: AbortSignal) => send({ path, query, signal, accept }),
    { close: () => agent.destroy() },
  );
}

/** `chunks`: where what was read goes, so that a caller keeps it if the read fails midway */
async function readBytes(res: IncomingMessage, chunks: Buffer[] = []): Promise<Buffer> {
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Reads a whole (small) response body. */
export async function readBody(res: IncomingMessage): Promise<string> {
  return (await readBytes(res)).toString("utf8");
}

/**
 * The object a whole body holds, JSON or protobuf as its Content-Type says;
 * throws when it does not decode, or is protobuf and no `protobuf` reader was
 * handed in (a caller that asked for JSON only).
 */
function bodyObject(res: IncomingMessage, body: Buffer, protobuf?: ProtobufReader): Record<string, unknown> {
  if (encodingOf(res.headers["content-type"]) !== "protobuf") return JSON.parse(body.toString("utf8")) as Record<string, unknown>;
  if (!protobuf) throw new Error("a protobuf answer, and no protobuf reader");
  return protobuf(body);
}

/** Reads a whole (small) response body as the object it holds (JSON, or protobuf read by `protobuf`). */
export async function readObject(res: IncomingMessage, protobuf?: ProtobufReader): Promise<Record<string, unknown>> {
  return bodyObject(res, await readBytes(res), protobuf);
}

/**
 * Turns a response whose status is not in `accept` into an HttpStatusError
 * carrying the Status message (JSON, or protobuf read by `protobuf`; without
 * a reader, the start of the body as text).
 */
export async function expectOK(
  res: IncomingMessage,
  accept: readonly number[] = [200],
  protobuf?: ProtobufReader,
): Promise<IncomingMessage> {
  if (accept.includes(res.statusCode ?? 0)) return res;
  const chunks: Buffer[] = [];
  const body = await readBytes(res, chunks).catch(() => Buffer.concat(chunks));
  let message = "";
  try {
    message = String(bodyObject(res, body, protobuf).message ?? "");
  } catch {
    message = body.toString("utf8").slice(0, 200);
  }
  throw new HttpStatusError(res.statusCode ?? 0, `HTTP ${res.statusCode}${message ? `: ${message}` : ""}`);
}
