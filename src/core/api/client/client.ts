// The client library's core: node-local states from a kpng brain, as a
// never-ending sequence of revisions. Reconnects forever with a delay; after
// a reconnect (a brain restart included) the resync is compared with what
// the consumer already has, so it sees only real changes, never a duplicate
// and never a lost delete.

import type { Revision } from "../../brain/brain.ts";
import { errorMessage } from "../../errors.ts";
import { createLogger, type Logger } from "../../log.ts";
import { DEFAULT_UNIX_SOCKET, formatApiAddress, parseClientAddress } from "../server/address.ts";
import { Replica } from "./replica.ts";
import { nextSnapshot, watchChangeSets } from "./streams.ts";
import { connectGrpc } from "./grpc.ts";
import { clientCredentials, type ClientSecurity } from "../tls/client.ts";

export const DEFAULT_API = DEFAULT_UNIX_SOCKET;

export interface ClientOptions {
  /** `unix:///path`, `tcp://HOST:PORT` or kpng's bare `HOST:PORT` (default unix:///run/kpng.sock) */
  api?: string;
  /** the node whose state is wanted */
  nodeName: string;
  /** `watch` (Sets.Watch diff stream, default) or `next` (Endpoints.Next full-state long poll) */
  protocol?: "watch" | "next";
  /** delay between reconnection attempts (default 1000 ms) */
  retryMs?: number;
  /** TLS and credentials for a TCP address (files read again at each connection) */
  security?: ClientSecurity;
  /** ends the sequence */
  signal?: AbortSignal;
  log?: Logger;
}

/**
 * Full-state model: each item is the whole node-local state after a change
 * set, with the keys of the services that changed (null on the first).
 * Unchanged services and endpoints keep their objects between revisions.
 */
export async function* watchStates(opts: ClientOptions): AsyncGenerator<Revision> {
  const addr = parseClientAddress(opts.api ?? DEFAULT_API);
  const where = formatApiAddress(addr);
  const log = opts.log ?? createLogger("kpng-client");
  const signal = opts.signal ?? new AbortController().signal;
  const retryMs = opts.retryMs ?? 1000;
  const replica = new Replica(opts.nodeName);
  let instanceID = 0n;
  let rev = 0n;
  while (!signal.aborted) {
    let connected = false;
    let conn: ReturnType<typeof connectGrpc> | undefined;
    try {
      conn = connectGrpc(addr, clientCredentials(opts.security));
      if (opts.protocol === "next") {
        while (!signal.aborted) {
          const snap = await nextSnapshot(conn, { instanceID, rev, nodeName: opts.nodeName }, signal);
          if (!connected) log.info("connected", { api: where, node: opts.nodeName, protocol: "next" });
          connected = true;
          ({ instanceID, rev } = snap);
          const r = replica.applySnapshot(snap.entries);
          if (r) yield r;
        }
      } else {
        // Not `for await`: Bun keeps an idle loop's last value (here a whole change set) alive.
        const sets = watchChangeSets(conn, opts.nodeName, signal);
        try {
          for (;;) {
            const cs = await sets.next();
            if (cs.done) break;
            if (!connected) log.info("connected", { api: where, node: opts.nodeName, protocol: "watch" });
            connected = true;
            const r = replica.applyChangeSet(cs.value);
            if (r) yield r;
          }
        } finally {
          void sets.return(undefined);
        }
        throw new Error("the server ended the stream");
      }
    } catch (err) {
      if (signal.aborted) break;
      log.warn("API stream failed, reconnecting", { api: where, error: errorMessage(err), retryMs });
    } finally {
      conn?.close();
    }
    await sleep(retryMs, signal);
  }
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
