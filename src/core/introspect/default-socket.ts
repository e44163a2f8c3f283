// The run mode's default socket: without --listen, a node's kpng still
// answers `kpng get` and `kpng verify` on unix:///run/kpng.sock, the address
// they ask first, so they need no flag (docs/introspection.md).
//
// Only the introspection service is served there, not the localv1/globalv1
// streams: `kpng backend` follows unix:///run/kpng.sock by default too, and a
// sidecar attaching unasked to a kpng that already programs the node would
// program it twice. Serving backends stays the operator's choice (--listen).
//
// It is best effort: the operator asked for nothing. A live process on the
// socket (a second kpng started by mistake, the test suite's many kpngs in
// network namespaces sharing the host's /run) keeps it: WARN, and run without
// it. A dead socket left by a kill -9 is replaced; on exit only the socket
// this process bound is removed (listener.ts checks the inode).

import { connectNodeAdapter } from "@connectrpc/connect-node";
import type { Brain } from "../brain/brain.ts";
import { DEFAULT_UNIX_SOCKET, parseApiAddress } from "../api/server/address.ts";
import { answering400, listen, type Listener } from "../api/server/listener.ts";
import { errorMessage } from "../errors.ts";
import type { Logger } from "../log.ts";
import { introspectRoutes, type IntrospectSource } from "./routes.ts";

export interface DefaultSocketOptions {
  brain: Brain;
  /** the node this kpng proxies: the only one it answers for */
  nodeName: string;
  /** the backends this process runs */
  source: IntrospectSource;
  log: Logger;
  /** `unix:///path` (default DEFAULT_UNIX_SOCKET; tests) */
  address?: string;
}

/** The introspection service on the default socket; undefined when it cannot be served (logged as a WARN). */
export async function serveDefaultSocket(opts: DefaultSocketOptions): Promise<Listener | undefined> {
  const spec = opts.address ?? DEFAULT_UNIX_SOCKET;
  const connect = connectNodeAdapter({
    routes: introspectRoutes({ brain: opts.brain, defaultNodeName: opts.nodeName, source: opts.source }),
  });
  const handler = answering400(connect);
  try {
    const listener = await listen(parseApiAddress(spec), handler, { what: "default socket" });
    opts.log.info("serving kpng get and kpng verify", { listen: spec });
    return listener;
  } catch (err) {
    opts.log.warn("not serving kpng get and kpng verify on the default socket: running without it", {
      error: errorMessage(err),
      hint: "--listen=unix:///PATH serves the API elsewhere; --listen= serves none",
    });
    return undefined;
  }
}
