// `kpng get services|endpoints [NAMESPACE/NAME]` and `kpng verify
// [NAMESPACE/NAME]`: clients of the running kpng's introspection API on this
// node (its unix socket by default, as kubectl asks its server). main.ts
// wires them; only it exits, with the code `run` returns.

import { existsSync } from "node:fs";
import { DEFAULT_UNIX_SOCKET } from "../api/server/address.ts";
import type { ParsedArgv } from "../config/argv.ts";
import { invalid, KpngError } from "../errors.ts";
import { checkClientSecurity, clientCredentials, usesTls, type ClientSecurity } from "../api/tls/client.ts";
import type { ApiAddress } from "../api/server/address.ts";
import { type Credentials, getServices, serverAddress, verify } from "./client.ts";
import { formatServices, formatVerify, verifyStatus, type Kind, type Output } from "./format.ts";

/**
 * Where kpng listens unless `--server` says: its own default socket, then the
 * one the deploy manifests give it (deploy/daemonset.yaml: a directory shared
 * with sidecars), so `kubectl exec ds/kpng -- kpng get services` needs no flag.
 */
export const DEFAULT_SERVERS = [DEFAULT_UNIX_SOCKET, "unix:///run/kpng/kpng.sock"];

function serverOf(parsed: ParsedArgv): string {
  if (typeof parsed.args.server === "string") return parsed.args.server;
  const found = DEFAULT_SERVERS.find((s) => existsSync(s.slice("unix://".length)));
  if (found) return found;
  throw new KpngError(
    "unavailable",
    `no kpng API socket at ${DEFAULT_SERVERS.join(" or ")}: start kpng with --listen=${DEFAULT_UNIX_SOCKET} (a node's kpng serves it unless --listen names other addresses, or --listen= turns it off), or point --server at the address it listens on`,
  );
}

const str = (v: unknown) => (typeof v === "string" && v !== "" ? v : undefined);

/** `--server` and its `--tls-*`/`--token-file`, checked as a node agent's `--api` (bad files: exit 2) */
function target(parsed: ParsedArgv): { addr: ApiAddress; credentials: Credentials } {
  const a = parsed.args;
  const sec: ClientSecurity = {
    files: { crt: str(a["tls-crt"]), key: str(a["tls-key"]), ca: str(a["tls-ca"]) },
    tokenFile: str(a["token-file"]),
  };
  checkClientSecurity([], sec);
  return { addr: serverAddress(serverOf(parsed), usesTls(sec)), credentials: clientCredentials(sec) };
}

const KINDS: Record<string, Kind> = {
  services: "services",
  service: "services",
  svc: "services",
  endpoints: "endpoints",
  endpoint: "endpoints",
  ep: "endpoints",
};

function output(value: unknown, allowed: readonly Output[]): Output {
  if (value === undefined) return "table";
  if (typeof value === "string" && allowed.includes(value as Output) && value !== "table") return value as Output;
  throw invalid(`flag --output: "${String(value)}" must be ${allowed.filter((o) => o !== "table").join(", ")}`);
}

/** `NAMESPACE/NAME` (or `--namespace`) as the API's filter */
function filterOf(args: readonly string[], namespace: unknown, nodeName: unknown) {
  if (args.length > 1) throw invalid(`unexpected argument "${args[1]}": give one NAMESPACE/NAME`);
  const node = typeof nodeName === "string" ? nodeName : "";
  const ns = typeof namespace === "string" ? namespace : "";
  if (!args.length) return { namespace: ns, name: "", nodeName: node };
  const m = /^([^/\s]+)\/([^/\s]+)$/.exec(args[0]);
  if (!m) throw invalid(`argument "${args[0]}": want NAMESPACE/NAME (a Service, as "default/kubernetes")`);
  if (ns && ns !== m[1]) throw invalid(`argument "${args[0]}": its namespace is not --namespace "${ns}"`);
  return { namespace: m[1], name: m[2], nodeName: node };
}

/** `kpng get`: prints the table (or JSON, YAML). */
export async function runGet(parsed: ParsedArgv, write: (text: string) => void): Promise<void> {
  const [what, ...rest] = parsed.positionals;
  const kind = what === undefined ? undefined : KINDS[what];
  if (!kind)
    throw invalid(`${what === undefined ? "no resource" : `unknown resource "${what}"`}: kpng get services|endpoints [NAMESPACE/NAME]`);
  const out = output(parsed.args.output, ["table", "wide", "json", "yaml"]);
  const filter = filterOf(rest, parsed.args.namespace, parsed.args["node-name"]);
  const { addr, credentials } = target(parsed);
  const reply = await getServices(addr, { filter, credentials });
  if (filter.name && !reply.services.length)
    throw new KpngError(
      "not_found",
      `service "${filter.namespace}/${filter.name}" is not proxied on node ${reply.nodeName} (revision ${reply.revision})`,
    );
  if (!reply.services.length && out !== "json" && out !== "yaml") {
    write(
      reply.revision ? "No resources found.\n" : `No resources found: node ${reply.nodeName} has no state yet (kpng has not synced).\n`,
    );
    return;
  }
  write(formatServices(reply, kind, out));
}

/** `kpng verify`: prints each drift; resolves only when every backend read back clean, else throws why (exit 1). */
export async function runVerify(parsed: ParsedArgv, write: (text: string) => void): Promise<void> {
  const out = output(parsed.args.output, ["table", "json", "yaml"]);
  const filter = filterOf(parsed.positionals, undefined, parsed.args["node-name"]);
  const { addr, credentials } = target(parsed);
  const reply = await verify(addr, { filter, credentials });
  if (!reply.backends.length)
    throw new KpngError(
      "failed_precondition",
      "no backend runs in this kpng (kpng serve is a brain only): ask the kpng that programs the node",
    );
  write(formatVerify(reply, out));
  const status = verifyStatus(reply);
  if (status === "clean") return;
  if (status === "unsupported") {
    const names = reply.backends.filter((b) => !b.supported).map((b) => b.name);
    throw new KpngError("failed_precondition", `not verified: ${names.join(", ")} cannot read the kernel back (no verify)`);
  }
  const n = reply.backends.reduce((sum, b) => sum + b.drifts.length + (b.error ? 1 : 0), 0);
  throw new KpngError("failed_precondition", `the kernel differs from what kpng programmed: ${n} difference${n === 1 ? "" : "s"}`);
}
