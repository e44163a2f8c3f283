// API addresses, shared by the server (`--listen`) and the client (`--api`):
// `unix:///path/to.sock` or `tcp://HOST:PORT`. The API reveals the cluster's
// topology (and a brain's answers program every node), so TCP anywhere but
// loopback is TLS, or plaintext by an explicit opt-in (logged as a WARN).

import { isIP } from "node:net";
import { invalid } from "../../errors.ts";

export type ApiAddress = { kind: "unix"; path: string } | { kind: "tcp"; host: string; port: number };

export const DEFAULT_UNIX_SOCKET = "unix:///run/kpng.sock";
export const DEFAULT_TCP = "tcp://127.0.0.1:12090";
export const DEFAULT_LISTEN = [DEFAULT_UNIX_SOCKET, DEFAULT_TCP];

/** Parses `unix://PATH` or `tcp://HOST:PORT`; `what` names the flag in errors. */
export function parseApiAddress(spec: string, what = "--listen"): ApiAddress {
  const bad = (why: string) => invalid(`flag ${what}: "${spec}" ${why}`);
  if (spec.startsWith("unix://")) {
    const path = spec.slice("unix://".length);
    if (!path) throw bad("has no socket path (want unix:///path/to.sock)");
    return { kind: "unix", path };
  }
  if (spec.startsWith("tcp://")) {
    const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:/[\]]+)):(\d{1,5})$/.exec(spec.slice("tcp://".length));
    if (!m) throw bad("must be tcp://HOST:PORT (IPv6 in brackets)");
    const port = Number(m[3]);
    if (port > 65535) throw bad("port is out of range");
    return { kind: "tcp", host: m[1] ?? m[2], port };
  }
  throw bad("must start with unix:// or tcp://");
}

/** A client address: the listen forms, plus kpng's bare `HOST:PORT` and bare socket paths. */
export function parseClientAddress(spec: string, what = "--api"): ApiAddress {
  if (spec.startsWith("/")) return { kind: "unix", path: spec };
  if (!spec.includes("://")) return parseApiAddress(`tcp://${spec}`, what);
  return parseApiAddress(spec, what);
}

export function isLoopback(host: string): boolean {
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return host === "::1";
}

/** A TCP address off loopback, which TLS (or an explicit opt-in) must cover. */
export const crossesNetwork = (addr: ApiAddress): boolean => addr.kind === "tcp" && !isLoopback(addr.host);

/** Throws unless the address is a unix socket, loopback TCP, served with TLS, or the operator allowed plaintext. */
export function checkListenAllowed(addr: ApiAddress, listenAny: boolean, spec: string, tls = false): void {
  if (!crossesNetwork(addr) || tls || listenAny) return;
  throw invalid(
    `flag --listen: "${spec}" is not a loopback address; the API reveals cluster topology: serve it with TLS (--listen-tls-crt, --listen-tls-key), or pass --listen-any to serve plaintext there anyway`,
  );
}

/** The client's side of the same rule: TLS, or `--api-plaintext`, to reach a brain off loopback. */
export function checkApiAllowed(addr: ApiAddress, plaintext: boolean, spec: string, tls: boolean): void {
  if (!crossesNetwork(addr) || tls || plaintext) return;
  throw invalid(
    `flag --api: "${spec}" is not a loopback address: connect with TLS (--tls-ca, and --tls-crt/--tls-key or --token-file to authenticate), or pass --api-plaintext to connect in plaintext anyway`,
  );
}

export const formatApiAddress = (a: ApiAddress): string =>
  a.kind === "unix" ? `unix://${a.path}` : `tcp://${a.host.includes(":") ? `[${a.host}]` : a.host}:${a.port}`;

/** Validates `--listen` values before anything starts (bad flags fail fast, exit code 2). */
export function checkListen(listen: readonly string[], listenAny: boolean, tls = false): void {
  for (const spec of listen) checkListenAllowed(parseApiAddress(spec), listenAny, spec, tls);
}
