// The small HTTP servers kpng runs beside the proxy (health, metrics,
// health-check node ports): one handler, plain answers, a clean close.

import { KpngError } from "../errors.ts";
import type { Logger } from "../log.ts";

export interface Answer {
  status: number;
  body: string;
  type?: string;
  headers?: Record<string, string>;
}

export interface HttpServer {
  readonly host: string;
  readonly port: number;
  /** `http://host:port` (IPv6 in brackets) */
  readonly url: string;
  close(): void;
}

/** "IP:port" / "[IPv6]:port" -> parts. */
export function bindHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(":");
  const host = address.slice(0, i).replace(/^\[(.*)\]$/, "$1");
  return { host, port: Number(address.slice(i + 1)) };
}

export const hostForURL = (host: string) => (host.includes(":") ? `[${host}]` : host);

/** Listens at once; throws KpngError("unavailable") when the address cannot be bound. */
export function serveHttp(opts: {
  host: string;
  port: number;
  what: string;
  log: Logger;
  handle: (url: URL, req: Request) => Answer | Promise<Answer>;
}): HttpServer {
  let server: ReturnType<typeof Bun.serve>;
  try {
    server = Bun.serve({
      hostname: opts.host,
      port: opts.port,
      // Health checkers and scrapers hold connections open; never let one keep us from closing.
      idleTimeout: 30,
      async fetch(req) {
        const a = await opts.handle(new URL(req.url), req);
        return new Response(a.body, { status: a.status, headers: { "Content-Type": a.type ?? "text/plain; charset=utf-8", ...a.headers } });
      },
    });
  } catch (err) {
    const code = (err as { code?: string }).code ?? (err as Error).message;
    throw new KpngError("unavailable", `${opts.what}: cannot listen on ${hostForURL(opts.host)}:${opts.port}: ${code}`);
  }
  const port = server.port ?? opts.port;
  const url = `http://${hostForURL(opts.host === "0.0.0.0" || opts.host === "::" ? "127.0.0.1" : opts.host)}:${port}`;
  opts.log.info(`serving ${opts.what}`, { address: `${hostForURL(opts.host)}:${port}` });
  return { host: opts.host, port, url, close: () => void server.stop(true) };
}
