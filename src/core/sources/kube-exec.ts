// Exec credential plugins (client.authentication.k8s.io ExecCredential), run
// as client-go runs them: the command with its args, in kpng's environment
// plus the plugin's `env` and KUBERNETES_EXEC_INFO, with no stdin (kpng is
// never interactive). Its stdout is one ExecCredential whose status holds a
// token and/or a client certificate and key, good until expirationTimestamp.
//
// A credential is reused until it expires, or until the API server refuses it
// (401): then the next request runs the plugin again, as client-go does.

import { spawn } from "node:child_process";
import * as v from "valibot";
import { KpngError } from "../errors.ts";
import { issuePath, issueProblem } from "../valibot-issues.ts";

export const EXEC_API_VERSIONS = ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"] as const;
export type ExecApiVersion = (typeof EXEC_API_VERSIONS)[number];

/** A user's exec plugin, its paths already resolved against the kubeconfig's directory. */
export interface ExecPlugin {
  /** the kubeconfig user it belongs to, for messages */
  user: string;
  command: string;
  args: string[];
  env: Array<{ name: string; value: string }>;
  apiVersion: ExecApiVersion;
  /** printed when the command cannot be run: where to get it */
  installHint?: string;
  /** spec.cluster of KUBERNETES_EXEC_INFO, given when the user sets provideClusterInfo */
  cluster?: Record<string, unknown>;
}

/** What a plugin returned. */
export interface ExecCredential {
  token?: string;
  /** PEM client certificate and key: both or neither */
  cert?: string;
  key?: string;
  /** ms since the epoch; absent = good until the API server refuses it */
  expires?: number;
}

/**
 * client-go sets no limit; kpng is a daemon, and a plugin that never exits
 * would leave the source waiting forever instead of retrying with backoff.
 */
export const EXEC_TIMEOUT_MS = 60_000;

const str = v.nullish(v.string("must be a string"));
const ExecOutput = v.object(
  {
    apiVersion: v.string("must be a string"),
    kind: v.literal("ExecCredential", 'must be "ExecCredential"'),
    status: v.nullish(
      v.object(
        {
          token: str,
          clientCertificateData: str,
          clientKeyData: str,
          expirationTimestamp: v.nullish(
            v.pipe(
              v.string("must be a string"),
              v.check((s) => !Number.isNaN(Date.parse(s)), "is not an RFC 3339 time"),
            ),
          ),
        },
        "must be a mapping",
      ),
    ),
  },
  "must be a mapping",
);

const pluginError = (p: ExecPlugin, code: "invalid_argument" | "unavailable", why: string) =>
  new KpngError(code, `exec plugin ${p.command} (user "${p.user}"): ${why}`);

/** Reads a plugin's stdout, with client-go's checks. */
export function parseExecCredential(p: ExecPlugin, stdout: string): ExecCredential {
  const bad = (why: string) => pluginError(p, "invalid_argument", `output: ${why}`);
  let raw: unknown;
  try {
    raw = JSON.parse(stdout);
  } catch {
    throw bad(`not an ExecCredential (not JSON: ${JSON.stringify(stdout.trim().split("\n")[0].slice(0, 80))})`);
  }
  const res = v.safeParse(ExecOutput, raw, { abortPipeEarly: true });
  if (!res.success) throw bad(`${issuePath(res.issues[0]) || "document"}: ${issueProblem(res.issues[0])}`);
  const { apiVersion, status } = res.output;
  if (apiVersion !== p.apiVersion) throw bad(`apiVersion: ${JSON.stringify(apiVersion)} is not the configured ${p.apiVersion}`);
  if (!status) throw bad("status: missing");
  const { token, clientCertificateData: cert, clientKeyData: key, expirationTimestamp } = status;
  if (!token && !cert && !key) throw bad("status: holds neither a token nor a client certificate and key");
  if (!cert !== !key)
    throw bad(`status: ${cert ? "clientKeyData" : "clientCertificateData"}: missing (a client certificate needs its key)`);
  return {
    ...(token ? { token } : {}),
    ...(cert ? { cert, key: key! } : {}),
    ...(expirationTimestamp ? { expires: Date.parse(expirationTimestamp) } : {}),
  };
}

/** KUBERNETES_EXEC_INFO: what client-go tells the plugin about the request. */
export function execInfo(p: ExecPlugin): string {
  return JSON.stringify({
    apiVersion: p.apiVersion,
    kind: "ExecCredential",
    spec: { interactive: false, ...(p.cluster ? { cluster: p.cluster } : {}) },
  });
}

/** Runs the plugin once; rejects with its exit status and the first line it wrote to stderr. */
export function runExecPlugin(p: ExecPlugin, timeoutMs = EXEC_TIMEOUT_MS): Promise<ExecCredential> {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, ...Object.fromEntries(p.env.map((e) => [e.name, e.value])), KUBERNETES_EXEC_INFO: execInfo(p) };
    const child = spawn(p.command, p.args, { env, stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (c: Buffer) => out.push(c));
    child.stderr.on("data", (c: Buffer) => err.push(c));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, timeoutMs);
    child.on("error", (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(
        pluginError(
          p,
          "unavailable",
          `cannot run: ${e.code ?? e.message}${p.installHint ? ` (${p.installHint.trim().split("\n")[0]})` : ""}`,
        ),
      );
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) {
        try {
          resolve(parseExecCredential(p, Buffer.concat(out).toString("utf8")));
        } catch (e) {
          reject(e);
        }
        return;
      }
      const line = Buffer.concat(err)
        .toString("utf8")
        .split("\n")
        .map((l) => l.trim())
        .find(Boolean);
      const how =
        code !== null ? `exited with code ${code}` : timedOut ? `did not finish within ${timeoutMs / 1000} s` : `killed by ${signal}`;
      reject(pluginError(p, "unavailable", `${how}${line ? `: ${line}` : ""}`));
    });
  });
}

/** A plugin's credential, cached; the `forget` of what `get` returned drops it after a 401. */
export interface ExecSource {
  get(): Promise<{ credential: ExecCredential; forget: () => void }>;
}

/**
 * Reuses a credential until it expires; callers arriving while the plugin
 * runs share that run; a failed run is not kept, so the next call tries again.
 */
export function execSource(run: () => Promise<ExecCredential>, now: () => number = Date.now): ExecSource {
  let cached: { promise: Promise<ExecCredential>; expires?: number } | undefined;
  return {
    async get() {
      if (!cached || (cached.expires !== undefined && now() >= cached.expires)) {
        const entry: NonNullable<typeof cached> = { promise: run() };
        cached = entry;
        entry.promise.then(
          (c) => void (entry.expires = c.expires),
          () => void (cached === entry && (cached = undefined)),
        );
      }
      const entry = cached;
      const credential = await entry.promise;
      // Several requests refused with the same credential run the plugin once, not once each.
      return { credential, forget: () => void (cached === entry && (cached = undefined)) };
    },
  };
}
