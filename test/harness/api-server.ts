// A Kubernetes API server small enough to read, speaking the real list/watch
// protocol for Services, EndpointSlices and Nodes on 127.0.0.1: one global
// resourceVersion counter (as etcd), paginated lists (limit/continue) whose
// items carry no kind (as the real server sends them), with the real
// server's resourceVersion semantics for lists ("0": from the watch cache,
// limit ignored, one answer; "": the latest, paged; N with a limit or
// resourceVersionMatch=Exact: the state at N, paged, 410 once compacted;
// N otherwise: not older than N), streamed lists (a watch with
// sendInitialEvents: ADDED events, then a BOOKMARK annotated
// k8s.io/initial-events-end), answers in protobuf when the Accept header
// prefers it (test/harness/protobuf-encode.ts) and in JSON otherwise,
// `watch=true` streams of newline-delimited JSON events or length-prefixed
// protobuf frames over chunked HTTP, label and field
// selectors (an object that stops matching is sent as DELETED, as the watch
// cache does), BOOKMARK events, compaction (a too old resourceVersion gets
// 410 Gone: as an ERROR event, or as an HTTP status), dropped connections,
// and going down and coming back up on the same port. Event creates (POST,
// core v1 and events.k8s.io/v1) are checked with the real server's
// validation rules and recorded, not stored. A request gets in with an
// accepted bearer token (the set can change: rotation), the basic-auth user,
// or a client certificate signed by the client CA, else 401. TokenReviews
// (authentication.k8s.io/v1) answer from a table of ServiceAccount tokens.

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createTLSServer } from "node:https";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { join } from "node:path";
import { asSent } from "../fixtures/k8s.ts";
import { encodeItem, encodeList, encodeObject, encodeWatchEvent } from "./protobuf-encode.ts";

const PROTOBUF = "application/vnd.kubernetes.protobuf";

/** Whether an Accept header gets protobuf: its first type this server has (protobuf, JSON, or any) decides, as the API server's negotiation. */
export function prefersProtobuf(accept: string | undefined): boolean {
  for (const t of (accept ?? "").split(",").map((x) => x.split(";")[0].trim().toLowerCase())) {
    if (t === PROTOBUF) return true;
    if (t === "application/json" || t === "*/*" || t === "application/*") return false;
  }
  return false;
}

export interface TestCert {
  cert: string;
  key: string;
}

/**
 * A throw-away self-signed certificate (it is its own CA), made with openssl:
 * for 127.0.0.1, or for `san` (e.g. "DNS:api.test"); files named `name`.crt/.key;
 * `days` -1 makes one already expired.
 */
export function makeTestCert(dir: string, opts: { san?: string; name?: string; days?: number } = {}): TestCert {
  const { san = "IP:127.0.0.1", name = "server", days = 1 } = opts;
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.crt`);
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-days",
      String(Math.max(days, 1)),
      "-keyout",
      key,
      "-out",
      cert,
      "-subj",
      `/CN=${san.replace(/^\w+:/, "")}`,
      "-addext",
      `subjectAltName=${san}`,
      "-addext",
      "basicConstraints=critical,CA:TRUE",
    ],
    { stdio: "ignore" },
  );
  // `req` takes no negative validity; signing the certificate again does, and keeps its extensions.
  if (days < 1) execFileSync("openssl", ["x509", "-in", cert, "-signkey", key, "-days", String(days), "-out", cert], { stdio: "ignore" });
  return { cert: readFileSync(cert, "utf8"), key: readFileSync(key, "utf8") };
}

/** A client certificate for `cn`, signed by `ca` (a makeTestCert certificate); files `name`.crt/.key in `dir`; `days` -1 makes one already expired. */
export function makeClientCert(
  dir: string,
  ca: TestCert,
  cn: string,
  name = "client",
  days = 1,
): TestCert & { certFile: string; keyFile: string } {
  const key = join(dir, `${name}.key`);
  const cert = join(dir, `${name}.crt`);
  const csr = join(dir, `${name}.csr`);
  const caCert = join(dir, `${name}-ca.crt`);
  const caKey = join(dir, `${name}-ca.key`);
  const ext = join(dir, `${name}.ext`);
  writeFileSync(caCert, ca.cert);
  writeFileSync(caKey, ca.key);
  writeFileSync(ext, "extendedKeyUsage=clientAuth\n");
  execFileSync(
    "openssl",
    ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr, "-subj", `/CN=${cn}`],
    { stdio: "ignore" },
  );
  execFileSync(
    "openssl",
    ["x509", "-req", "-in", csr, "-CA", caCert, "-CAkey", caKey, "-CAcreateserial", "-days", String(days), "-out", cert, "-extfile", ext],
    { stdio: "ignore" },
  );
  return { cert: readFileSync(cert, "utf8"), key: readFileSync(key, "utf8"), certFile: cert, keyFile: key };
}

/** Who the server lets in: bearer tokens, one basic-auth user, client certificates signed by a CA. */
export interface ServerAuth {
  /** PEM CA: a client certificate it signed authenticates the request */
  clientCA?: string;
  basic?: { username: string; password: string };
}

type Obj = Record<string, unknown> & {
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string };
};

const resources: Record<string, { kind: string; apiVersion: string; namespaced: boolean }> = {
  "/api/v1/services": { kind: "Service", apiVersion: "v1", namespaced: true },
  "/apis/discovery.k8s.io/v1/endpointslices": { kind: "EndpointSlice", apiVersion: "discovery.k8s.io/v1", namespaced: true },
  "/api/v1/nodes": { kind: "Node", apiVersion: "v1", namespaced: false },
};

interface HistoryEvent {
  rv: number;
  type: "ADDED" | "MODIFIED" | "DELETED";
  prev?: Obj;
  obj: Obj;
}

interface Watcher {
  kind: string;
  matches: (o: Obj) => boolean;
  bookmarks: boolean;
  res: ServerResponse;
  rv: number;
  protobuf: boolean;
}

export interface RequestRecord {
  method: string;
  path: string;
  query: Record<string, string>;
  watch: boolean;
  /** the Authorization header as sent */
  authorization?: string;
  /** the Accept header as sent */
  accept?: string;
  /** a client certificate signed by the server's client CA came with it */
  clientCert: boolean;
}

/** An Event create the server received, accepted or not. */
export interface EventPost {
  group: "v1" | "events.k8s.io/v1";
  namespace: string;
  body: Record<string, unknown>;
  status: number;
}

const eventPath = /^\/(api\/v1|apis\/events\.k8s\.io\/v1)\/namespaces\/([^/]+)\/events$/;
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const qualifiedName = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const microTime = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$/;

/**
 * The API server's create validation of an events.k8s.io/v1 Event
 * (pkg/apis/core/validation/events.go ValidateEventCreate, strict for this
 * API): "field: problem" for each error.
 */
export function eventsV1Errors(ev: Record<string, unknown>, namespace: string): string[] {
  const errs: string[] = [];
  const str = (k: string) => (typeof ev[k] === "string" ? (ev[k] as string) : "");
  const meta = (ev.metadata ?? {}) as { name?: string };
  const regarding = (ev.regarding ?? {}) as { namespace?: string };
  if (!meta.name || meta.name.length > 253 || !dnsSubdomain.test(meta.name))
    errs.push(`metadata.name: Invalid value: "${meta.name ?? ""}"`);
  if (!microTime.test(str("eventTime"))) errs.push("eventTime: Required value");
  if (str("type") !== "Normal" && str("type") !== "Warning") errs.push(`type: Invalid value: has invalid value: ${str("type")}`);
  for (const k of ["deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount"]) {
    if (ev[k] !== undefined && ev[k] !== null && ev[k] !== 0 && !(typeof ev[k] === "object" && Object.keys(ev[k] as object).length === 0))
      errs.push(`${k}: Invalid value: needs to be unset`);
  }
  // A cluster-scoped object's events live in "default" or "kube-system".
  if (!regarding.namespace && namespace !== "default" && namespace !== "kube-system")
    errs.push("regarding.namespace: Invalid value: does not match event.namespace");
  if (!qualifiedName.test(str("reportingController")))
    errs.push(`reportingController: Invalid value: "${str("reportingController")}": must be a qualified name`);
  for (const k of ["reportingInstance", "action", "reason"]) {
    if (!str(k)) errs.push(`${k}: Required value`);
    else if (str(k).length > 128) errs.push(`${k}: Invalid value: can have at most 128 characters`);
  }
  if (Buffer.byteLength(str("note")) > 1024) errs.push("note: Invalid value: can have at most 1024 characters");
  return errs;
}

/** `a`, `!a`, `a=b`, `a==b`, `a!=b`, comma-separated (the forms kube-proxy uses, and a few more). */
export function labelMatcher(selector: string): (labels: Record<string, string>) => boolean {
  const reqs = selector
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((r) => {
      let m: RegExpExecArray | null;
      if ((m = /^!([^=!]+)$/.exec(r))) return (l: Record<string, string>) => !(m![1] in l);
      if ((m = /^([^=!]+)!=(.*)$/.exec(r))) return (l: Record<string, string>) => l[m![1]] !== m![2];
      if ((m = /^([^=!]+)==?(.*)$/.exec(r))) return (l: Record<string, string>) => l[m![1]] === m![2];
      return (l: Record<string, string>) => r in l;
    });
  return (labels) => reqs.every((f) => f(labels));
}

function fieldMatcher(selector: string): (o: Obj) => boolean {
  const reqs = selector
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((r) => {
      const [k, v] = r.split("=");
      const get = (o: Obj) =>
        k === "metadata.name" ? o.metadata.name : k === "metadata.namespace" ? (o.metadata.namespace ?? "") : undefined;
      return (o: Obj) => get(o) === v;
    });
  return (o) => reqs.every((f) => f(o));
}

export class FakeApiServer {
  private server: Server;
  private rv = 100;
  private compactedTo = 0;
  private readonly objects = new Map<string, Obj>();
  /** keys of `objects`, sorted (list order); rebuilt after an object comes or goes */
  private sorted: string[] | null = null;
  private readonly history: HistoryEvent[] = [];
  private watchers = new Set<Watcher>();
  private readonly sockets = new Set<Socket>();
  /** connections accepted (TLS handshakes done), ever */
  connections = 0;
  private failures: Array<{ status: number } & FailOptions> = [];
  port = 0;
  /** how a too old resourceVersion is refused on a watch */
  goneAs: "event" | "http" = "event";
  readonly requests: RequestRecord[] = [];
  /** Event creates received, in order */
  readonly events: EventPost[] = [];
  /** time spent building list answers (ms), for benchmarks: how much of a list is this server */
  listMs = 0;
  /** answer Event creates with this status (403: RBAC refuses), or never answer them */
  eventReply: number | "hang" | undefined;
  /** the next streamed list of `kind` is cut (its connection destroyed) after `after` events */
  cutNextStream: { kind: string; after: number } | undefined;
  /** streamed lists (sendInitialEvents, the WatchList gate, on since 1.32): false answers them 422, as a server with the gate off */
  watchList = true;
  /** a watch cache (the API server's default) answers a list at resourceVersion "0" in one piece; without (--watch-cache=false) etcd pages it */
  watchCache = true;
  /** answers protobuf to a client that prefers it; false: a server (or an aggregated API) that speaks JSON only */
  protobuf = true;
  /** each object's protobuf bytes, made at the first protobuf answer that holds it (the watch cache keeps objects decoded; serialising is the server's per-list cost) */
  private readonly encoded = new Map<string, Uint8Array>();
  /** each object's ADDED event as written to a watch, per encoding: a streamed list of 20,000 objects is then one write (the real server keeps serialized watch events too) */
  private readonly added = new Map<string, { protobuf?: Uint8Array; json?: string }>();
  /** bearer tokens accepted (a test rotates them) */
  readonly tokens = new Set(["test-token"]);
  /** TokenReview answers: token -> the user it belongs to and the audiences it was issued for */
  readonly serviceAccountTokens = new Map<string, { username: string; audiences: string[] }>();
  /** TokenReviews received */
  tokenReviews = 0;

  private constructor(
    private readonly tls?: TestCert,
    private readonly auth: ServerAuth = {},
  ) {
    this.server = this.makeServer();
  }

  /** HTTPS with `tls` (what real API servers speak), else plain HTTP; `auth` adds ways in besides the tokens. */
  static async start(tls?: TestCert, auth?: ServerAuth): Promise<FakeApiServer> {
    const s = new FakeApiServer(tls, auth);
    await s.up();
    return s;
  }

  get url() {
    return `${this.tls ? "https" : "http"}://127.0.0.1:${this.port}`;
  }

  get openWatches() {
    return this.watchers.size;
  }

  get resourceVersion() {
    return String(this.rv);
  }

  /** Writes a kubeconfig pointing at this server (or at `server`, a way to reach it from elsewhere); returns its path. */
  writeKubeconfig(dir: string, name = "kubeconfig", server = this.url): string {
    const path = join(dir, name);
    writeFileSync(
      path,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: fake",
        "  cluster:",
        `    server: "${server}"`,
        ...(this.tls ? [`    certificate-authority-data: ${Buffer.from(this.tls.cert).toString("base64")}`] : []),
        "users:",
        "- name: tester",
        "  user: { token: test-token }",
        "contexts:",
        "- name: fake",
        "  context: { cluster: fake, user: tester }",
        "current-context: fake",
        "",
      ].join("\n"),
    );
    return path;
  }

  // -- cluster changes

  /** `input` raw or validated (test/fixtures/k8s.ts): served as the API server sends it */
  apply(input: Record<string, unknown>, opts: { brokenProtobuf?: boolean } = {}): void {
    const obj = structuredClone(asSent(input as never)) as Obj;
    const key = keyOf(obj);
    const prev = this.objects.get(key);
    obj.metadata.resourceVersion = String(++this.rv);
    if (!prev) this.sorted = null;
    this.objects.set(key, obj);
    this.encoded.delete(key);
    this.added.delete(key);
    // bytes no decoder can read past its metadata: a last field claiming 127 bytes that are not there
    if (opts.brokenProtobuf) this.encoded.set(key, Uint8Array.from([...encodeItem(obj.kind, obj), 0x1a, 0x7f]));
    this.emit({ rv: this.rv, type: prev ? "MODIFIED" : "ADDED", prev, obj });
  }

  remove(kind: string, namespace: string | undefined, name: string): void {
    const key = `${kind}/${namespace ?? ""}/${name}`;
    const prev = this.objects.get(key);
    if (!prev) return;
    this.objects.delete(key);
    this.encoded.delete(key);
    this.added.delete(key);
    this.sorted = null;
    const obj = structuredClone(prev);
    obj.metadata.resourceVersion = String(++this.rv);
    this.emit({ rv: this.rv, type: "DELETED", prev, obj });
  }

  /** Forgets the event history: resuming a watch from an older resourceVersion now gets 410. */
  compact(): void {
    this.compactedTo = this.rv;
    this.history.length = 0;
  }

  /** A BOOKMARK with the current resourceVersion to every watch that asked for them. */
  bookmark(): void {
    for (const w of this.watchers) {
      if (!w.bookmarks) continue;
      this.send(w, "BOOKMARK", emptyObject(w.kind, { resourceVersion: String(this.rv) }));
    }
  }

  /**
   * Writes bytes as they are into every open watch of `kind`: `protobuf` to
   * protobuf watches, `json` to JSON ones (an injected fault: a frame or line
   * no client can decode). Returns how many watches got them.
   */
  injectWatch(kind: string, raw: { protobuf?: Uint8Array; json?: string }): number {
    let n = 0;
    for (const w of this.watchers) {
      const bytes = w.protobuf ? raw.protobuf : raw.json;
      if (w.kind !== kind || bytes === undefined || w.res.writableEnded) continue;
      w.res.write(bytes);
      n++;
    }
    return n;
  }

  /** Cuts every connection (watch streams included) without a goodbye. */
  dropConnections(): void {
    for (const s of this.sockets) s.destroy();
    this.watchers.clear();
  }

  /** The next `n` requests (of those `opts` picks) fail with `status`. */
  failNext(n: number, status = 500, opts: FailOptions = {}): void {
    for (let i = 0; i < n; i++) this.failures.push({ status, ...opts });
  }

  async down(): Promise<void> {
    const closed = new Promise<void>((r) => this.server.close(() => r()));
    this.dropConnections();
    await closed;
  }

  async up(): Promise<void> {
    this.server = this.makeServer();
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.port, "127.0.0.1", () => resolve());
    });
    this.port = (this.server.address() as { port: number }).port;
  }

  close(): Promise<void> {
    return this.down();
  }

  // -- HTTP

  private makeServer(): Server {
    const handler = (req: IncomingMessage, res: ServerResponse) => this.handle(req, res);
    // A client certificate is asked for, not required: the request may still bring a token.
    const clientCerts = this.auth.clientCA ? { ca: this.auth.clientCA, requestCert: true, rejectUnauthorized: false } : {};
    const server = this.tls ? createTLSServer({ cert: this.tls.cert, key: this.tls.key, ...clientCerts }, handler) : createServer(handler);
    server.on(this.tls ? "secureConnection" : "connection", (s: Socket) => {
      this.sockets.add(s);
      this.connections++;
      s.on("close", () => this.sockets.delete(s));
    });
    return server;
  }

  private emit(ev: HistoryEvent) {
    this.history.push(ev);
    for (const w of this.watchers) this.deliver(w, ev);
  }

  private deliver(w: Watcher, ev: HistoryEvent) {
    if (ev.obj.kind !== w.kind || ev.rv <= w.rv) return;
    const now = ev.type !== "DELETED" && w.matches(ev.obj);
    const before = ev.prev !== undefined && w.matches(ev.prev);
    const type =
      ev.type === "DELETED" ? (before ? "DELETED" : null) : now && before ? "MODIFIED" : now ? "ADDED" : before ? "DELETED" : null;
    w.rv = ev.rv;
    if (type) this.send(w, type, wire(ev.obj), type === "DELETED" ? undefined : keyOf(ev.obj));
  }

  /** one event; `key`: the object is the current one of that key, its protobuf bytes kept */
  private send(w: Watcher, type: string, object: Record<string, unknown> & { kind: string }, key?: string) {
    if (w.res.writableEnded) return;
    const item = w.protobuf && key && this.objects.has(key) ? this.itemBytes(key, this.objects.get(key)!) : undefined;
    w.res.write(w.protobuf ? encodeWatchEvent(type, object.kind, object as Obj, item) : JSON.stringify({ type, object }) + "\n");
  }

  /** the ADDED event of the current object of `key`, as a watch in that encoding carries it */
  private addedEvent(key: string, o: Obj, protobuf: boolean): Uint8Array | string {
    let e = this.added.get(key);
    if (!e) this.added.set(key, (e = {}));
    if (protobuf) return (e.protobuf ??= encodeWatchEvent("ADDED", o.kind, wire(o), this.itemBytes(key, o)));
    return (e.json ??= JSON.stringify({ type: "ADDED", object: wire(o) }) + "\n");
  }

  /** an object's protobuf message bytes, kept until it changes */
  private itemBytes(key: string, o: Obj): Uint8Array {
    let b = this.encoded.get(key);
    if (!b) this.encoded.set(key, (b = encodeItem(o.kind, o)));
    return b;
  }

  /** the objects as they were at `rv` (history undone back to it), keys sorted */
  private snapshotAt(rv: number): { objects: Map<string, Obj>; keys: string[] } {
    if (rv >= this.rv) return { objects: this.objects, keys: (this.sorted ??= [...this.objects.keys()].sort()) };
    const objects = new Map(this.objects);
    for (let i = this.history.length - 1; i >= 0 && this.history[i].rv > rv; i--) {
      const ev = this.history[i];
      const key = keyOf(ev.obj);
      if (ev.type === "ADDED") objects.delete(key);
      else objects.set(key, ev.prev!);
    }
    return { objects, keys: [...objects.keys()].sort() };
  }

  private handle(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? "/", "http://x");
    const query = Object.fromEntries(url.searchParams);
    const watch = query.watch === "true" || query.watch === "1";
    const protobuf = this.protobuf && prefersProtobuf(req.headers.accept);
    // Bun's TLS socket has `authorized` but no getPeerCertificate: a signed certificate is all we learn.
    const clientCert = !!this.auth.clientCA && (req.socket as TLSSocket).authorized === true;
    const authorization = req.headers.authorization;
    const accept = req.headers.accept;
    this.requests.push({
      method: req.method ?? "GET",
      path: url.pathname,
      query,
      watch,
      ...(authorization ? { authorization } : {}),
      ...(accept ? { accept } : {}),
      clientCert,
    });
    const at = this.failures.findIndex((f) => (!f.path || f.path === url.pathname) && (!f.continued || !!query.continue));
    if (at >= 0) {
      const [failure] = this.failures.splice(at, 1);
      failure.meanwhile?.();
      return status(res, failure.status, "InternalError", "injected failure", protobuf);
    }
    if (!clientCert && !this.authorized(authorization)) return status(res, 401, "Unauthorized", "Unauthorized", protobuf);
    if (url.pathname === "/apis/authentication.k8s.io/v1/tokenreviews" && req.method === "POST") return void this.tokenReview(req, res);
    const ev = eventPath.exec(url.pathname);
    if (ev && req.method === "POST") return void this.createEvent(req, res, ev[1] === "api/v1" ? "v1" : "events.k8s.io/v1", ev[2]);
    const one = /^\/api\/v1\/nodes\/([^/]+)$/.exec(url.pathname);
    if (one && req.method === "GET") return this.getNode(decodeURIComponent(one[1]), res, protobuf);
    const resource = resources[url.pathname];
    if (!resource || req.method !== "GET")
      return status(res, 404, "NotFound", "the server could not find the requested resource", protobuf);
    const labels = labelMatcher(query.labelSelector ?? "");
    const fields = fieldMatcher(query.fieldSelector ?? "");
    const matches = (o: Obj) => labels(o.metadata.labels ?? {}) && fields(o);
    if (watch) return this.watch(resource.kind, matches, query, res, protobuf);
    const t0 = performance.now();
    this.list(resource.kind, resource.apiVersion, matches, query, res, protobuf);
    this.listMs += performance.now() - t0;
  }

  /** GET of one Node (kube-proxy's getNodeIPs asks for its own) */
  private getNode(name: string, res: ServerResponse, protobuf: boolean) {
    const o = this.objects.get(`Node//${name}`);
    if (!o) return status(res, 404, "NotFound", `nodes "${name}" not found`, protobuf);
    res.writeHead(200, { "Content-Type": protobuf ? PROTOBUF : "application/json" });
    res.end(protobuf ? encodeObject("Node", o, this.itemBytes(`Node//${name}`, o)) : JSON.stringify(wire(o)));
  }

  private authorized(header: string | undefined): boolean {
    const [scheme, value = ""] = (header ?? "").split(" ");
    if (scheme === "Bearer") return this.tokens.has(value);
    const b = this.auth.basic;
    return scheme === "Basic" && !!b && Buffer.from(value, "base64").toString() === `${b.username}:${b.password}`;
  }

  /** As the real authenticator: unknown token, or none of the asked audiences -> not authenticated, with an error. */
  private async tokenReview(req: IncomingMessage, res: ServerResponse) {
    this.tokenReviews++;
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { spec?: { token?: string; audiences?: string[] } };
    const sa = this.serviceAccountTokens.get(body.spec?.token ?? "");
    const wanted = body.spec?.audiences ?? [];
    const audiences = sa && (wanted.length ? wanted.filter((a) => sa.audiences.includes(a)) : sa.audiences);
    const status = !sa
      ? { authenticated: false, error: "invalid bearer token" }
      : !audiences?.length
        ? { authenticated: false, error: "token audiences are invalid for the target audiences" }
        : { authenticated: true, user: { username: sa.username, groups: ["system:serviceaccounts"] }, audiences };
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ apiVersion: "authentication.k8s.io/v1", kind: "TokenReview", spec: body.spec, status }));
  }

  private async createEvent(req: IncomingMessage, res: ServerResponse, group: EventPost["group"], namespace: string) {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Record<string, unknown>;
    } catch {
      return status(res, 400, "BadRequest", "the request body is not JSON");
    }
    const record = (code: number) => this.events.push({ group, namespace, body, status: code });
    if (this.eventReply === "hang") return record(0);
    if (this.eventReply !== undefined) {
      record(this.eventReply);
      if (this.eventReply !== 403) return status(res, this.eventReply, "InternalError", "injected failure");
      const g = group === "v1" ? "" : "events.k8s.io";
      return status(
        res,
        403,
        "Forbidden",
        `events${g ? `.${g}` : ""} is forbidden: User "system:serviceaccount:kube-system:kpng" cannot create resource "events" in API group "${g}" in the namespace "${namespace}"`,
      );
    }
    const meta = (body.metadata ?? {}) as { name?: string; namespace?: string };
    if (meta.namespace && meta.namespace !== namespace) {
      record(400);
      return status(res, 400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request");
    }
    const errs = group === "events.k8s.io/v1" ? eventsV1Errors(body, namespace) : [];
    if (errs.length) {
      record(422);
      return status(res, 422, "Invalid", `Event.events.k8s.io "${meta.name ?? ""}" is invalid: [${errs.join(", ")}]`);
    }
    record(201);
    res.writeHead(201, { "Content-Type": "application/json" });
    res.end(
      JSON.stringify({
        ...body,
        apiVersion: group,
        kind: "Event",
        metadata: { ...meta, namespace, uid: crypto.randomUUID(), resourceVersion: String(++this.rv) },
      }),
    );
  }

  private list(
    kind: string,
    apiVersion: string,
    matches: (o: Obj) => boolean,
    q: Record<string, string>,
    res: ServerResponse,
    protobuf: boolean,
  ) {
    const fail = (code: number, reason: string, message: string) => status(res, code, reason, message, protobuf);
    let after = "";
    let rv = this.rv;
    let limit = Number(q.limit) || Infinity;
    if (q.continue) {
      if (q.resourceVersion) return fail(400, "BadRequest", "specifying resource version is not allowed when using continue");
      const token = JSON.parse(Buffer.from(q.continue, "base64").toString()) as { rv: number; after: string };
      if (token.rv < this.compactedTo)
        // as the real server: with a token to go on from the latest state (an inconsistent list)
        return status(
          res,
          410,
          "Expired",
          "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
          protobuf,
          { continue: continueToken(this.rv, token.after) },
        );
      ({ after, rv } = token);
    } else {
      const asked = q.resourceVersion ?? "";
      const n = Number(asked);
      const exact =
        q.resourceVersionMatch === "Exact" || (!q.resourceVersionMatch && Number.isFinite(limit) && asked !== "" && asked !== "0");
      if (asked === "0" && !exact) {
        // Any state will do: the watch cache answers with what it holds, in one piece (it ignores limit).
        if (this.watchCache) limit = Infinity;
      } else if (asked !== "") {
        if (!/^\d+$/.test(asked)) return fail(400, "BadRequest", `invalid resource version "${asked}"`);
        if (n > this.rv) return fail(504, "Timeout", `Too large resource version: ${n}, current: ${this.rv}`);
        if (exact) {
          if (n < this.compactedTo) return fail(410, "Expired", `The resourceVersion for the provided list is too old.`);
          rv = n;
        }
      }
    }
    // A page costs its own size, as from the real server's watch cache: keys are
    // sorted once, and a kind's keys are contiguous (`Kind/ns/name`).
    const { objects, keys } = this.snapshotAt(rv);
    const prefix = `${kind}/`;
    const page: Array<[string, Obj]> = [];
    let more = false;
    let i = lowerBound(keys, after ? after + "\0" : prefix);
    for (; i < keys.length && keys[i].startsWith(prefix); i++) {
      const o = objects.get(keys[i])!;
      if (!matches(o)) continue;
      if (page.length === limit) {
        more = true;
        break;
      }
      page.push([keys[i], o]);
    }
    const cont = more ? continueToken(rv, page.at(-1)![0]) : undefined;
    // how many items the next pages hold: said, as the real server, only of a list no selector filters
    const remainingItemCount = more && !q.labelSelector && !q.fieldSelector ? lowerBound(keys, `${kind}0`) - i : undefined;
    const meta = {
      resourceVersion: String(rv),
      ...(cont ? { continue: cont } : {}),
      ...(remainingItemCount !== undefined ? { remainingItemCount } : {}),
    };
    if (protobuf) {
      // an object of an older snapshot is encoded afresh; the current ones once
      const items = page.map(([key, o]) => (objects === this.objects ? this.itemBytes(key, o) : encodeItem(kind, o)));
      res.writeHead(200, { "Content-Type": PROTOBUF });
      return void res.end(encodeList(kind, items, meta));
    }
    // List items carry no kind/apiVersion on the wire; serialized at once, so no copy is needed.
    const items = page.map(([, o]) => {
      const { kind: _k, apiVersion: _a, ...rest } = o as Obj & { apiVersion?: unknown };
      return rest;
    });
    res.writeHead(200, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ kind: `${kind}List`, apiVersion, metadata: meta, items }));
  }

  private watch(kind: string, matches: (o: Obj) => boolean, q: Record<string, string>, res: ServerResponse, protobuf: boolean) {
    const from = q.resourceVersion ? Number(q.resourceVersion) : 0;
    const contentType = protobuf ? `${PROTOBUF};stream=watch` : "application/json";
    const w: Watcher = { kind, matches, bookmarks: q.allowWatchBookmarks === "true", res, rv: from, protobuf };
    // A streamed list (client-go's watch-list): the state as ADDED events, then a BOOKMARK saying they are all there.
    const streamed = q.sendInitialEvents === "true";
    if (streamed) {
      const invalid = (why: string) => status(res, 422, "Invalid", `ListOptions.meta.k8s.io "" is invalid: ${why}`, protobuf);
      if (!this.watchList)
        return invalid(
          "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        );
      if (q.resourceVersionMatch !== "NotOlderThan")
        return invalid("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan");
      if (!w.bookmarks) return invalid("allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true");
      if (from > this.rv) return status(res, 504, "Timeout", `Too large resource version: ${from}, current: ${this.rv}`, protobuf);
    }
    if (!streamed && from !== 0 && from < this.compactedTo) {
      const message = `too old resource version: ${from} (${this.compactedTo})`;
      if (this.goneAs === "http") return status(res, 410, "Expired", message, protobuf);
      res.writeHead(200, { "Content-Type": contentType, "Transfer-Encoding": "chunked" });
      this.send(w, "ERROR", { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason: "Expired", code: 410 });
      res.end();
      return;
    }
    res.writeHead(200, { "Content-Type": contentType, "Transfer-Encoding": "chunked" });
    res.flushHeaders();
    if (from === 0 || streamed) {
      // resourceVersion unset (or a streamed list, not older than it): the current state as ADDED events first,
      // written in one go (the real server flushes only when no event is queued); a list's work (listMs)
      const t0 = performance.now();
      const cut = streamed && this.cutNextStream?.kind === kind ? this.cutNextStream.after : undefined;
      if (cut !== undefined) this.cutNextStream = undefined;
      const events: Array<Uint8Array | string> = [];
      // in key order, as the real server's watch cache sends them
      const { keys } = this.snapshotAt(this.rv);
      for (let i = lowerBound(keys, `${kind}/`); i < keys.length && keys[i].startsWith(`${kind}/`); i++) {
        const key = keys[i];
        const o = this.objects.get(key)!;
        if (!matches(o)) continue;
        if (events.length === cut) {
          res.write(w.protobuf ? Buffer.concat(events as Uint8Array[]) : events.join(""));
          return void res.socket?.destroy();
        }
        events.push(this.addedEvent(key, o, w.protobuf));
      }
      if (events.length) res.write(w.protobuf ? Buffer.concat(events as Uint8Array[]) : events.join(""));
      w.rv = this.rv;
      if (streamed) {
        this.send(
          w,
          "BOOKMARK",
          emptyObject(kind, { resourceVersion: String(this.rv), annotations: { "k8s.io/initial-events-end": "true" } }),
        );
      }
      this.listMs += performance.now() - t0;
    } else for (const ev of this.history) this.deliver(w, ev);
    this.watchers.add(w);
    const timeout = Number(q.timeoutSeconds) || 0;
    const timer = timeout ? setTimeout(() => res.end(), timeout * 1000) : undefined;
    res.on("close", () => {
      clearTimeout(timer);
      this.watchers.delete(w);
    });
  }
}

/** index of the first key >= `key` */
function lowerBound(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** which requests an injected failure hits, and what changes as it is answered */
export interface FailOptions {
  /** only requests to this path */
  path?: string;
  /** only a list's next pages (requests with a continue token) */
  continued?: boolean;
  /** runs as the failure is answered: the state changes between two requests */
  meanwhile?: () => void;
}

const keyOf = (o: Obj) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;

function wire(o: Obj): Obj {
  const api = Object.values(resources).find((r) => r.kind === o.kind)!;
  return { ...structuredClone(o), apiVersion: api.apiVersion };
}

/** a list's continue token: the state it reads (rv) and the last key it gave */
const continueToken = (rv: number, after: string) => Buffer.from(JSON.stringify({ rv, after })).toString("base64");

/**
 * An empty object of `kind` with only `metadata` set, as a BOOKMARK carries
 * it: the real server sends the kind's zero value, whose JSON holds the
 * fields without omitempty (recorded from kube-apiserver 1.36.2 by
 * test/sources/kube/wire-real.test.ts).
 */
function emptyObject(kind: string, metadata: Record<string, unknown>): Obj {
  const apiVersion = Object.values(resources).find((r) => r.kind === kind)!.apiVersion;
  const zero: Record<string, Record<string, unknown>> = {
    Service: { spec: {}, status: { loadBalancer: {} } },
    EndpointSlice: { addressType: "", endpoints: null, ports: null },
    Node: {
      spec: {},
      status: {
        daemonEndpoints: { kubeletEndpoint: { Port: 0 } },
        nodeInfo: {
          machineID: "",
          systemUUID: "",
          bootID: "",
          kernelVersion: "",
          osImage: "",
          containerRuntimeVersion: "",
          kubeletVersion: "",
          kubeProxyVersion: "",
          operatingSystem: "",
          architecture: "",
        },
      },
    },
  };
  return { kind, apiVersion, metadata: metadata as Obj["metadata"], ...structuredClone(zero[kind]) };
}

/** a refusal, as a Status in the type the client prefers */
function status(
  res: ServerResponse,
  code: number,
  reason: string,
  message: string,
  protobuf = false,
  metadata: Record<string, string> = {},
) {
  const body = { kind: "Status", apiVersion: "v1", metadata, status: "Failure", message, reason, code };
  res.writeHead(code, { "Content-Type": protobuf ? PROTOBUF : "application/json" });
  res.end(protobuf ? encodeObject("Status", body) : JSON.stringify(body));
}
