// A client's credentials for a brain over TCP (the node agent's and a
// sidecar's `--api`): TLS with `--tls-ca` (else the system's roots), a
// client certificate (`--tls-crt`, `--tls-key`) and/or a ServiceAccount
// token (`--token-file`). Files are read again at every connection, so a
// rotated certificate or token is used from the next reconnect on.

import { readFileSync } from "node:fs";
import { errorMessage, invalid } from "../../errors.ts";
import type { ConnectOptions } from "../client/grpc.ts";
import { checkApiAllowed, parseClientAddress } from "../server/address.ts";
import { checkTlsFiles, CLIENT_FLAGS, hasTls, readTlsFiles, type TlsFiles } from "./files.ts";

export interface ClientSecurity {
  files?: TlsFiles;
  /** a bearer token (a projected ServiceAccount token), read at each connection */
  tokenFile?: string;
  /** allow plaintext to a brain off loopback (`--api-plaintext`) */
  plaintext?: boolean;
}

/** TLS is on for TCP addresses when any TLS flag or a token is given: a token never travels in plaintext. */
export const usesTls = (sec: ClientSecurity | undefined): boolean => hasTls(sec?.files) || !!sec?.tokenFile;

/** Start-up checks (exit 2 on bad input): files that go together, files that read, the plaintext rule. */
export function checkClientSecurity(apis: readonly string[], sec: ClientSecurity | undefined): void {
  if (sec?.files) checkTlsFiles(sec.files, CLIENT_FLAGS, false);
  clientCredentials(sec);
  for (const spec of apis) checkApiAllowed(parseClientAddress(spec), sec?.plaintext ?? false, spec, usesTls(sec));
}

/** What connectGrpc needs, from the files as they are now. */
export function clientCredentials(sec: ClientSecurity | undefined): Pick<ConnectOptions, "tls" | "token"> {
  if (!usesTls(sec)) return {};
  const tls = readTlsFiles(sec!.files ?? {}, CLIENT_FLAGS);
  if (!sec!.tokenFile) return { tls };
  let token: string;
  try {
    token = readFileSync(sec!.tokenFile, "utf8").trim();
  } catch (err) {
    throw invalid(`flag --token-file: ${sec!.tokenFile}: cannot read: ${(err as NodeJS.ErrnoException).code ?? errorMessage(err)}`);
  }
  if (!token || /\s/.test(token))
    throw invalid(`flag --token-file: ${sec!.tokenFile}: not a bearer token (empty, or has whitespace inside)`);
  return { tls, token };
}
