// The flags of `kpng get` and `kpng verify`, apart from their code so that
// `--help` loads none of it.

import { DEFAULT_UNIX_SOCKET } from "../api/server/address.ts";
import type { FlagDefs } from "../config/argv.ts";

const serverArg = {
  server: {
    type: "string",
    alias: ["s"],
    description: `the running kpng's API: unix:///path or tcp://127.0.0.1:PORT (default ${DEFAULT_UNIX_SOCKET}, else unix:///run/kpng/kpng.sock; a node's kpng serves the first unless --listen says otherwise)`,
  },
} as const satisfies FlagDefs;

/**
 * A TCP --server served with TLS (`--listen-tls-*`): the same flags, read and
 * checked by the same code (src/core/api/tls/), as a node agent's `--api`.
 */
const tlsArgs = {
  "tls-ca": {
    type: "string",
    description: "TLS to a tcp:// --server: the CA that signed kpng's certificate (PEM; default: the system's roots)",
  },
  "tls-crt": { type: "string", description: "TLS to --server: this client's certificate (PEM), for a kpng started with --listen-tls-ca" },
  "tls-key": { type: "string", description: "the key of --tls-crt (PEM)" },
  "token-file": {
    type: "string",
    description:
      "TLS to --server, authenticated by this ServiceAccount token (audience kpng), for a kpng started with --listen-token-review",
  },
} as const satisfies FlagDefs;

export const getArgs = {
  ...serverArg,
  ...tlsArgs,
  "node-name": {
    type: "string",
    description: "the node whose view to show, when asking a `kpng serve` brain (default: the kpng's own node)",
  },
  output: { type: "string", alias: ["o"], description: "wide, json or yaml (default: columns)" },
  namespace: { type: "string", alias: ["n"], description: "only this namespace's Services" },
} as const satisfies FlagDefs;

export const verifyArgs = {
  ...serverArg,
  ...tlsArgs,
  output: { type: "string", alias: ["o"], description: "json or yaml (default: columns)" },
} as const satisfies FlagDefs;
