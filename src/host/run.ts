// `run(handler)`: the one-call entry point for a backend process of one's
// own, fed over the API by the client library (src/core/api/client/). Reads `--api`, `--node-name`, `--protocol`,
// `--once` and the TLS flags (`--tls-ca`, `--tls-crt`, `--tls-key`,
// `--token-file`, `--api-plaintext`) from the command line, feeds the handler until SIGINT or
// SIGTERM (or the first sync with --once), then returns: library code never
// exits the process.

import { hostname } from "node:os";
import { parseArgs } from "node:util";
import type { Backend, FullStateBackend } from "./backend.ts";
import { runSidecar } from "./sidecar.ts";
import { invalid } from "../core/errors.ts";
import { createLogger } from "../core/log.ts";
import type { NodeState, StateChange } from "../core/brain/state.ts";
import { DEFAULT_API, type ClientOptions } from "../core/api/client/client.ts";
import { checkClientSecurity, type ClientSecurity } from "../core/api/tls/client.ts";

/** A Backend (full or incremental), or just a function called with each full state. */
export type Handler = Backend | ((state: NodeState, change: StateChange) => void | Promise<void>);

export interface RunOptions extends Partial<ClientOptions> {
  once?: boolean;
  /** flags to read instead of process.argv */
  argv?: string[];
}

export function runFlags(argv: string[]): Partial<RunOptions> {
  const { values } = parseArgs({
    args: argv,
    strict: false,
    allowPositionals: true,
    options: {
      api: { type: "string" },
      "node-name": { type: "string" },
      protocol: { type: "string" },
      once: { type: "boolean" },
      "tls-ca": { type: "string" },
      "tls-crt": { type: "string" },
      "tls-key": { type: "string" },
      "token-file": { type: "string" },
      "api-plaintext": { type: "boolean" },
    },
  });
  const protocol = values.protocol;
  if (protocol !== undefined && protocol !== "watch" && protocol !== "next")
    throw invalid(`flag --protocol: "${String(protocol)}" must be watch or next`);
  const str = (v: unknown) => (typeof v === "string" ? v : undefined);
  const security: ClientSecurity = {
    files: { ca: str(values["tls-ca"]), crt: str(values["tls-crt"]), key: str(values["tls-key"]) },
    tokenFile: str(values["token-file"]),
    plaintext: values["api-plaintext"] === true,
  };
  return { api: str(values.api), nodeName: str(values["node-name"]), protocol, once: values.once === true ? true : undefined, security };
}

export async function run(handler: Handler, opts: RunOptions = {}): Promise<void> {
  const flags = runFlags(opts.argv ?? process.argv.slice(2));
  const pick = <K extends keyof RunOptions>(k: K) => (opts[k] !== undefined ? opts[k] : flags[k]);
  const security = pick("security");
  checkClientSecurity([pick("api") ?? DEFAULT_API], security);
  const backend: Backend =
    typeof handler === "function"
      ? ({ kind: "full", name: handler.name || "handler", apply: async (s, c) => handler(s, c) } satisfies FullStateBackend)
      : handler;
  const ac = new AbortController();
  const stop = () => ac.abort();
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  opts.signal?.addEventListener("abort", stop, { once: true });
  try {
    await runSidecar({
      backends: [backend],
      api: pick("api"),
      security,
      nodeName: pick("nodeName") ?? process.env.NODE_NAME ?? hostname().toLowerCase(),
      protocol: pick("protocol"),
      once: pick("once"),
      retryMs: opts.retryMs,
      log: opts.log ?? createLogger("kpng-client"),
      signal: ac.signal,
    });
  } finally {
    process.off("SIGINT", stop);
    process.off("SIGTERM", stop);
    opts.signal?.removeEventListener("abort", stop);
  }
}
