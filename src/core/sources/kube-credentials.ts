// What a request to the API server carries, picked for a kubeconfig user as
// client-go picks it: a bearer token (a token file wins over an inline token,
// and is read again for each request: bound service-account tokens are
// rotated in place), else basic auth; a client certificate; and, only when
// none of those is set, an exec plugin's token and/or certificate.

import { readFile } from "node:fs/promises";
import type { CredentialSource, Credentials } from "../kube-http/access.ts";
import { execSource, runExecPlugin, type ExecCredential, type ExecPlugin } from "./kube-exec.ts";

/** A file read once at load (so a missing one is a start-up error) and again before each request. */
export interface RereadFile {
  path: string;
  /** its contents at load */
  initial: string;
}

export interface UserAuth {
  token?: string;
  tokenFile?: RereadFile;
  basic?: { username: string; password: string };
  /** inline PEM, or a file (certificates on disk get renewed) */
  cert?: string | RereadFile;
  key?: string | RereadFile;
  exec?: ExecPlugin;
}

/**
 * What the file holds now; what it held last when it cannot be read or is
 * empty for a moment (a rotation that replaces the file), as client-go's
 * cached token source keeps its last token.
 */
function reread(file: RereadFile, clean: (s: string) => string = (s) => s): () => Promise<string> {
  let last = clean(file.initial);
  return async () => {
    const now = clean(await readFile(file.path, "utf8").catch(() => ""));
    if (now) last = now;
    return last;
  };
}

const pem = (p: string | RereadFile | undefined) => (p === undefined ? undefined : typeof p === "string" ? async () => p : reread(p));

const noop = () => {};

const fromExec = (c: ExecCredential, forget: () => void): Credentials => ({
  ...(c.token ? { authorization: `Bearer ${c.token}` } : {}),
  ...(c.cert ? { cert: c.cert, key: c.key } : {}),
  refused: forget,
});

/** `runExec` is the plugin runner (tests count its runs). */
export function credentialSource(auth: UserAuth, runExec: (p: ExecPlugin) => Promise<ExecCredential> = runExecPlugin): CredentialSource {
  const tokenFile = auth.tokenFile && reread(auth.tokenFile, (s) => s.trim());
  const basic = auth.basic && `Basic ${Buffer.from(`${auth.basic.username}:${auth.basic.password}`).toString("base64")}`;
  const cert = pem(auth.cert);
  const key = pem(auth.key);
  // client-go's exec authenticator stands aside when the user also has a token, basic auth or a certificate.
  const explicit = auth.token || tokenFile || basic || cert;
  const exec = auth.exec && !explicit ? execSource(() => runExec(auth.exec!)) : undefined;
  return async () => {
    if (exec) {
      const { credential, forget } = await exec.get();
      return fromExec(credential, forget);
    }
    const token = tokenFile ? await tokenFile() : auth.token;
    const authorization = token ? `Bearer ${token}` : basic;
    return {
      ...(authorization ? { authorization } : {}),
      ...(cert && key ? { cert: await cert(), key: await key() } : {}),
      refused: noop,
    };
  };
}
