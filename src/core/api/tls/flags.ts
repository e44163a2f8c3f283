// The API's TLS and authentication flags as options, checked at start-up
// (bad input: one line naming the flag, exit 2): the serving side's
// `--listen-tls-*` and `--listen-token-review`, the clients' `--tls-*`,
// `--token-file` and `--api-plaintext`.

import type { Args } from "../../config/flags.ts";
import { invalid } from "../../errors.ts";
import type { Logger } from "../../log.ts";
import { checkListen, crossesNetwork, parseApiAddress, parseClientAddress } from "../server/address.ts";
import type { ApiServerOptions } from "../server/index.ts";
import { checkClientSecurity, usesTls, type ClientSecurity } from "./client.ts";
import { checkTlsFiles, hasTls, readTlsFiles, SERVER_FLAGS, type TlsFiles } from "./files.ts";

const str = (args: Args, k: string) => (typeof args[k] === "string" && args[k] !== "" ? (args[k] as string) : undefined);
const list = (s: string | undefined) =>
  (s ?? "")
    .split(",")
    .map((x) => x.trim())
    .filter(Boolean);

export interface ServeSecurity {
  tls?: ApiServerOptions["tls"];
  /** usernames whose tokens are let in (TokenReview) */
  tokenUsers: string[];
  listenAny: boolean;
}

/** `--listen*` flags, checked with the addresses they serve. */
export function serveSecurity(args: Args, listen: readonly string[], source: { input?: string; api?: readonly string[] }): ServeSecurity {
  const files: TlsFiles = { crt: str(args, "listen-tls-crt"), key: str(args, "listen-tls-key"), ca: str(args, "listen-tls-ca") };
  const tls = hasTls(files) ? { files } : undefined;
  if (tls) {
    checkTlsFiles(files, SERVER_FLAGS, true);
    readTlsFiles(files, SERVER_FLAGS);
    if (!listen.some((spec) => parseApiAddress(spec).kind === "tcp"))
      throw invalid(`flag --listen-tls-crt: no tcp:// --listen to serve with TLS (the unix socket is not served with TLS)`);
  }
  const tokenUsers = list(str(args, "listen-token-review"));
  if (tokenUsers.length) {
    if (!tls)
      throw invalid(
        "flag --listen-token-review: requires TLS (--listen-tls-crt, --listen-tls-key): a bearer token must not travel in plaintext",
      );
    if (source.input !== undefined || source.api?.length)
      throw invalid("flag --listen-token-review: requires access to the API server (not with --input or --api)");
  }
  const listenAny = args["listen-any"] === true;
  checkListen(listen, listenAny, !!tls);
  return { tls, tokenUsers, listenAny };
}

/** `--tls-*`, `--token-file`, `--api-plaintext` for the given `--api` addresses. */
export function apiClientSecurity(args: Args, apis: readonly string[], log: Logger): ClientSecurity {
  const sec: ClientSecurity = {
    files: { crt: str(args, "tls-crt"), key: str(args, "tls-key"), ca: str(args, "tls-ca") },
    tokenFile: str(args, "token-file"),
    plaintext: args["api-plaintext"] === true,
  };
  checkClientSecurity(apis, sec);
  const open = apis.filter((spec) => crossesNetwork(parseClientAddress(spec)));
  if (open.length && !usesTls(sec))
    log.warn(
      "following the brain in plaintext off loopback (--api-plaintext): anyone on the path can read the cluster and program this node",
      { api: open.join(",") },
    );
  return sec;
}
