// Requests to the API server with the kubeconfig's TLS and credentials.
//
// @kubernetes/client-node builds the request options (CA, client
// certificate, token files, exec and OIDC plugins, proxies) through
// KubeConfig.applyToHTTPSOptions, and we use exactly those. Its own list and
// watch helpers go through undici, whose `dispatcher` (and with it the CA and
// client certificate) Bun's built-in undici ignores: against a real cluster
// they fail TLS inside the compiled binary. node:http(s) honours the options
// under both Bun and Node, so the transport is this small module.

import type { KubeConfig } from "@kubernetes/client-node";
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type RequestOptions } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";

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
  signal?: AbortSignal;
}

export type KubeRequest = (opts: KubeRequestOptions) => Promise<IncomingMessage>;

export class HttpStatusError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A request function bound to the current context of `kc`. Credentials are
 * re-read per request (rotated tokens). With `agent`, connections are kept
 * for the next request: without, each request pays a TCP and TLS handshake.
 */
export function kubeRequest(kc: KubeConfig, agent?: HttpAgent): KubeRequest {
  const server = kc.getCurrentCluster()!.server.replace(/\/+$/, "");
  return async ({ method = "GET", path, query = {}, body, signal }) => {
    const url = new URL(server + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") url.searchParams.set(k, v);
    const opts: RequestOptions & Record<string, unknown> = {};
    await kc.applyToHTTPSOptions(opts);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers: Record<string, string | number> = { ...(opts.headers as Record<string, string> | undefined), Accept: "application/json" };
    if (payload !== undefined) Object.assign(headers, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(payload) });
    const request = url.protocol === "https:" ? httpsRequest : httpRequest;
    return await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(url, { ...opts, agent, method, headers, signal }, resolve);
      req.on("error", reject);
      req.end(payload);
    });
  };
}

/**
 * A GET function bound to the current context of `kc`, keeping its
 * connections: a list of 10,000 objects is 20 pages, and a handshake a page
 * (each next page is asked for while the last one is read, so a fresh
 * connection each time) cost ~150 ms of a 10,000-service start-up.
 */
export function kubeGet(kc: KubeConfig): KubeGet {
  const agent = kc.getCurrentCluster()!.server.startsWith("https:") ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
  const send = kubeRequest(kc, agent);
  return Object.assign((path: string, query: Record<string, string | undefined>, signal: AbortSignal) => send({ path, query, signal }), { close: () => agent.destroy() });
}

/** Reads a whole (small) response body. */
export async function readBody(res: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Turns a response whose status is not in `accept` into an HttpStatusError carrying the Status message. */
export async function expectOK(res: IncomingMessage, accept: readonly number[] = [200]): Promise<IncomingMessage> {
  if (accept.includes(res.statusCode ?? 0)) return res;
  const text = await readBody(res).catch(() => "");
  let message = "";
  try {
    message = (JSON.parse(text) as { message?: string }).message ?? "";
  } catch {
    message = text.slice(0, 200);
  }
  throw new HttpStatusError(res.statusCode ?? 0, `HTTP ${res.statusCode}${message ? `: ${message}` : ""}`);
}
