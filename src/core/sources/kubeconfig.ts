// How kpng reaches the API server, found as kube-proxy's client-go finds it:
// a kubeconfig file (--kubeconfig, or clientConnection.kubeconfig), --master
// over its current cluster's server or alone (anonymous), else the pod's
// service account.
//
// A kubeconfig is validated whole (a value of the wrong type anywhere is an
// error, as client-go's decoder makes it; unknown fields are allowed), and
// the current context's cluster and user are checked for what kpng does not
// do: auth-provider plugins, proxy-url and impersonation are refused at
// start-up rather than ignored, since each would change who kpng talks to or
// as whom. Relative paths are resolved against the kubeconfig's directory,
// as client-go does (the exec command only when it holds a "/").

import { readFileSync } from "node:fs";
import { dirname, isAbsolute, join, resolve } from "node:path";
import * as v from "valibot";
import { parseDocument } from "yaml";
import { fastYaml } from "../config/yaml-fast.ts";
import { errorMessage, invalid } from "../errors.ts";
import { issuePath, issueProblem } from "../valibot-issues.ts";
import type { KubeAccess, ServerTLS } from "../kube-http/access.ts";
import { credentialSource, type RereadFile, type UserAuth } from "./kube-credentials.ts";
import { EXEC_API_VERSIONS, type ExecPlugin } from "./kube-exec.ts";

export interface KubeConfigOptions {
  kubeconfig?: string;
  master?: string;
  env?: NodeJS.ProcessEnv;
  /** roots /var/run/secrets/kubernetes.io/serviceaccount (tests) */
  inClusterPrefix?: string;
}

// -- the file, as written (clientcmd/api/v1): every field may be absent or null

const str = v.nullish(v.string("must be a string"));
const bool = v.nullish(v.boolean("must be true or false"));
const mapping = <E extends v.ObjectEntries>(entries: E) => v.object(entries, "must be a mapping");
const list = <T extends v.GenericSchema>(item: T) => v.nullish(v.array(item, "must be a list"), () => []);
const name = v.string("must be a string");

const ClusterSchema = mapping({
  server: str,
  "certificate-authority": str,
  "certificate-authority-data": str,
  "insecure-skip-tls-verify": bool,
  "tls-server-name": str,
  "proxy-url": str,
});

const ExecSchema = mapping({
  command: v.pipe(v.string("must be a string"), v.minLength(1, "must not be empty")),
  args: list(v.string("must be a string")),
  env: list(
    mapping({
      name: v.pipe(v.string("must be a string"), v.minLength(1, "must not be empty")),
      value: v.nullish(v.string("must be a string"), ""),
    }),
  ),
  apiVersion: v.picklist(EXEC_API_VERSIONS, `must be one of: ${EXEC_API_VERSIONS.join(", ")}`),
  installHint: str,
  provideClusterInfo: bool,
  // kpng never has a terminal to offer; the mode is checked, not used.
  interactiveMode: v.nullish(v.picklist(["Never", "IfAvailable", "Always"], "must be one of: Never, IfAvailable, Always")),
});

const UserSchema = mapping({
  token: str,
  tokenFile: str,
  username: str,
  password: str,
  "client-certificate": str,
  "client-certificate-data": str,
  "client-key": str,
  "client-key-data": str,
  exec: v.nullish(ExecSchema),
  // refused when the current user has them (see refusals below)
  "auth-provider": v.optional(v.unknown()),
  as: str,
  "as-uid": str,
  "as-groups": v.optional(v.unknown()),
  "as-user-extra": v.optional(v.unknown()),
});

const KubeconfigSchema = mapping({
  apiVersion: v.nullish(v.literal("v1", 'must be "v1"')),
  kind: v.nullish(v.literal("Config", 'must be "Config"')),
  clusters: list(mapping({ name, cluster: v.nullish(ClusterSchema, () => ({})) })),
  users: list(mapping({ name, user: v.nullish(UserSchema, () => ({})) })),
  contexts: list(mapping({ name, context: v.nullish(mapping({ cluster: str, user: str }), () => ({})) })),
  "current-context": str,
});

export type Kubeconfig = v.InferOutput<typeof KubeconfigSchema>;
type ClusterEntry = v.InferOutput<typeof ClusterSchema>;
type UserEntry = v.InferOutput<typeof UserSchema>;

/**
 * The `yaml` library's reading of a kubeconfig: what the fast path leaves
 * (an error to name, a key that may repeat). client-go's decoder takes the
 * last of repeated keys without a word (sigs.k8s.io/yaml's non-strict
 * YAMLToJSON); a person typed this file, so kpng says which key repeats.
 */
function parseYaml(where: string, text: string): unknown {
  const parsed = parseDocument(text, { uniqueKeys: true });
  const err = parsed.errors[0];
  if (err) {
    const line = err.linePos?.[0]?.line;
    const why = err.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
    throw invalid(`${where}: not valid YAML${line ? ` (line ${line})` : ""}: ${why}`);
  }
  return parsed.toJS() as unknown;
}

/** Parses and validates a kubeconfig's text; errors start with `where` (`--kubeconfig PATH`). */
export function parseKubeconfig(where: string, text: string): Kubeconfig {
  const raw = fastYaml(text) ?? parseYaml(where, text);
  if (raw === null || raw === undefined) throw invalid(`${where}: the file is empty`);
  if (typeof raw !== "object" || Array.isArray(raw))
    throw invalid(`${where}: not a kubeconfig (a mapping with clusters, contexts and users)`);
  const res = v.safeParse(KubeconfigSchema, raw, { abortPipeEarly: true });
  if (!res.success) throw invalid(`${where}: ${issuePath(res.issues[0])}: ${issueProblem(res.issues[0])}`);
  // client-go turns the lists into maps and refuses a name given twice.
  for (const kind of ["clusters", "users", "contexts"] as const) {
    const seen = new Set<string>();
    for (const [i, e] of res.output[kind].entries()) {
      if (seen.has(e.name)) throw invalid(`${where}: ${kind}[${i}].name: ${JSON.stringify(e.name)} is used twice`);
      seen.add(e.name);
    }
  }
  return res.output;
}

/** The current context's cluster and user (no user: anonymous). */
export function currentContext(
  where: string,
  doc: Kubeconfig,
): { cluster: { name: string; cluster: ClusterEntry }; user?: { name: string; user: UserEntry } } {
  const ctxName = doc["current-context"] ?? "";
  const noCluster = (why: string) => invalid(`${where}: no cluster for current-context "${ctxName}" (${why})`);
  if (!ctxName) throw noCluster("current-context is not set");
  const ctx = doc.contexts.find((c) => c.name === ctxName)?.context;
  if (!ctx) throw noCluster("no context has that name");
  const cluster = doc.clusters.find((c) => c.name === (ctx.cluster ?? ""));
  if (!cluster) throw noCluster(`its cluster "${ctx.cluster ?? ""}" is not in clusters`);
  if (!ctx.user) return { cluster };
  const user = doc.users.find((u) => u.name === ctx.user);
  if (!user) throw invalid(`${where}: no user for current-context "${ctxName}" (its user "${ctx.user}" is not in users)`);
  return { cluster, user };
}

// -- loading

const isHttpURL = (s: string) => /^https?:\/\/[^/]/.test(s) && URL.canParse(s);
const trimSlash = (s: string) => s.replace(/\/+$/, "");
const readCode = (err: unknown) => (err as NodeJS.ErrnoException).code ?? errorMessage(err).split("\n")[0];

/** A file named in the kubeconfig, read now: missing or unreadable is a start-up error. */
function readNamed(field: string, path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw invalid(`${field}: cannot read ${path}: ${readCode(err)}`);
  }
}

/** A `*-data` field: base64 of PEM. */
function decodeData(field: string, data: string): string {
  const b64 = data.replace(/\s+/g, "");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b64) || b64.length % 4 !== 0) throw invalid(`${field}: not base64`);
  return Buffer.from(b64, "base64").toString("utf8");
}

const PEM_MARK = { certificate: "-----BEGIN CERTIFICATE-----", key: "PRIVATE KEY-----" } as const;
function checkPem(field: string, what: keyof typeof PEM_MARK, text: string): string {
  if (!text.includes(PEM_MARK[what])) throw invalid(`${field}: not a PEM ${what === "key" ? "private key" : "certificate"}`);
  return text;
}

/** PEM from `<field>-data` (which wins, as in client-go) or from the file `<field>`; undefined if neither is set. */
function pemOf(
  at: string,
  field: string,
  what: keyof typeof PEM_MARK,
  file: string | null | undefined,
  data: string | null | undefined,
  base: string,
): string | RereadFile | undefined {
  if (data) return checkPem(`${at}${field}-data`, what, decodeData(`${at}${field}-data`, data));
  if (!file) return undefined;
  const path = resolveFrom(base, file);
  return { path, initial: checkPem(`${at}${field}`, what, readNamed(`${at}${field}`, path)) };
}

const resolveFrom = (base: string, p: string) => (isAbsolute(p) ? p : join(base, p));

function clusterAccess(where: string, name: string, c: ClusterEntry, base: string, master?: string): { server: string; tls: ServerTLS } {
  const at = `${where}: cluster "${name}": `;
  if (c["proxy-url"])
    throw invalid(`${at}proxy-url: ${JSON.stringify(c["proxy-url"])} is not supported by kpng (it connects to the API server directly)`);
  const server = master ?? c.server;
  if (!server) throw invalid(`${at}server: missing`);
  if (!isHttpURL(server)) throw invalid(`${at}server: ${JSON.stringify(server)} is not an http(s) URL`);
  const ca = pemOf(at, "certificate-authority", "certificate", c["certificate-authority"], c["certificate-authority-data"], base);
  const insecure = c["insecure-skip-tls-verify"] ?? false;
  // client-go: "specifying a root certificates file with the insecure flag is not allowed"
  if (insecure && ca) throw invalid(`${at}insecure-skip-tls-verify: cannot be combined with a certificate authority`);
  return {
    server: trimSlash(server),
    tls: {
      ...(ca ? { ca: typeof ca === "string" ? ca : ca.initial } : {}),
      ...(c["tls-server-name"] ? { servername: c["tls-server-name"] } : {}),
      insecure,
    },
  };
}

const IMPERSONATION = ["as", "as-uid", "as-groups", "as-user-extra"] as const;
const isSet = (x: unknown) => x !== undefined && x !== null && x !== "" && !(typeof x === "object" && Object.keys(x).length === 0);

function userAuth(where: string, name: string, u: UserEntry, base: string, cluster: { server: string; tls: ServerTLS }): UserAuth {
  const at = `${where}: user "${name}": `;
  if (isSet(u["auth-provider"])) {
    const provider = (u["auth-provider"] as { name?: unknown }).name;
    const named = typeof provider === "string" && provider ? ` ${JSON.stringify(provider)}` : "";
    throw invalid(`${at}auth-provider:${named} is not supported by kpng (use a token, a client certificate or an exec plugin)`);
  }
  for (const f of IMPERSONATION) if (isSet(u[f])) throw invalid(`${at}${f}: impersonation is not supported by kpng`);
  const hasBasic = !!(u.username || u.password);
  if (hasBasic && (u.token || u.tokenFile))
    throw invalid(`${at}username: cannot be combined with a token (one authentication method only)`);
  const cert = pemOf(at, "client-certificate", "certificate", u["client-certificate"], u["client-certificate-data"], base);
  const key = pemOf(at, "client-key", "key", u["client-key"], u["client-key-data"], base);
  if (cert && !key) throw invalid(`${at}client-key: missing (client-certificate needs its key)`);
  if (key && !cert) throw invalid(`${at}client-certificate: missing (client-key needs its certificate)`);
  const auth: UserAuth = {};
  if (u.token) auth.token = u.token;
  if (u.tokenFile) {
    const path = resolveFrom(base, u.tokenFile);
    const initial = readNamed(`${at}tokenFile`, path);
    if (!initial.trim()) throw invalid(`${at}tokenFile: ${path} is empty`);
    auth.tokenFile = { path, initial };
  }
  if (hasBasic) auth.basic = { username: u.username ?? "", password: u.password ?? "" };
  if (cert && key) Object.assign(auth, { cert, key });
  if (u.exec) auth.exec = execPlugin(name, u.exec, base, cluster);
  return auth;
}

function execPlugin(
  user: string,
  e: NonNullable<UserEntry["exec"]>,
  base: string,
  cluster: { server: string; tls: ServerTLS },
): ExecPlugin {
  return {
    user,
    command: e.command.includes("/") ? resolveFrom(base, e.command) : e.command,
    args: e.args,
    env: e.env.map((x) => ({ name: x.name, value: x.value })),
    apiVersion: e.apiVersion,
    ...(e.installHint ? { installHint: e.installHint } : {}),
    ...(e.provideClusterInfo
      ? {
          cluster: {
            server: cluster.server,
            ...(cluster.tls.servername ? { "tls-server-name": cluster.tls.servername } : {}),
            ...(cluster.tls.insecure ? { "insecure-skip-tls-verify": true } : {}),
            ...(cluster.tls.ca ? { "certificate-authority-data": Buffer.from(cluster.tls.ca).toString("base64") } : {}),
          },
        }
      : {}),
  };
}

function fromKubeconfig(file: string, master?: string): KubeAccess {
  const where = `--kubeconfig ${file}`;
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw invalid(`${where}: cannot load: ${readCode(err)}`);
  }
  const doc = parseKubeconfig(where, text);
  const { cluster, user } = currentContext(where, doc);
  const base = dirname(resolve(file));
  const access = clusterAccess(where, cluster.name, cluster.cluster, base, master);
  const auth = user ? userAuth(where, user.name, user.user, base, access) : {};
  return { ...access, credentials: credentialSource(auth) };
}

const SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount";

/** client-go's InClusterConfig: the service's address, the CA and the (rotated) token the kubelet mounts. */
function inCluster(env: NodeJS.ProcessEnv, prefix: string): KubeAccess {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port)
    throw invalid("no --kubeconfig, --master or --input given, and not running in a pod (KUBERNETES_SERVICE_HOST is unset)");
  const read = (file: string, missing: string) => {
    const path = `${prefix}${SERVICE_ACCOUNT}/${file}`;
    try {
      return { path, text: readFileSync(path, "utf8") };
    } catch (err) {
      const code = readCode(err);
      throw invalid(`in-cluster configuration: ${code === "ENOENT" ? missing : `cannot read ${SERVICE_ACCOUNT}/${file}: ${code}`}`);
    }
  };
  const token = read("token", `no service account token at ${SERVICE_ACCOUNT}/token`);
  const ca = read("ca.crt", `no cluster CA at ${SERVICE_ACCOUNT}/ca.crt`);
  checkPem(`in-cluster configuration: ${SERVICE_ACCOUNT}/ca.crt`, "certificate", ca.text);
  return {
    // net.JoinHostPort: an IPv6 address goes in brackets
    server: `https://${host.includes(":") ? `[${host}]` : host}:${port}`,
    tls: { ca: ca.text, insecure: false },
    credentials: credentialSource({ tokenFile: { path: token.path, initial: token.text } }),
  };
}

/** kubeconfig file, --master, or the pod's service account, as kube-proxy picks them. */
export function loadKubeConfig(opts: KubeConfigOptions): KubeAccess {
  if (opts.master !== undefined && !isHttpURL(opts.master)) throw invalid(`flag --master: "${opts.master}" is not an http(s) URL`);
  if (opts.kubeconfig) return fromKubeconfig(opts.kubeconfig, opts.master || undefined);
  if (opts.master) return { server: trimSlash(opts.master), tls: { insecure: false }, credentials: credentialSource({}) };
  return inCluster(opts.env ?? process.env, opts.inClusterPrefix ?? "");
}
