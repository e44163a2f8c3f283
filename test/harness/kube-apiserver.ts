// The real Kubernetes control plane for tests: etcd 3.5 and kube-apiserver
// 1.36.2 (the binaries of ../shared/k8s, found by KPNG_K8S_BIN first), each
// run inside a network namespace of its own, so their fixed ports (2379,
// 6443) never meet the host's or another suite's. The test process reaches
// the API server through ns_forward.py (listening on a free host port);
// a kpng process in a node namespace through a forward into that namespace
// (reach()), as https://127.0.0.1:6443, the address kube-proxy's kubeconfig
// names on a kubeadm node.
//
// Objects are written with the real kubectl, as users write them. Bulk
// fixtures (thousands of filler Services) are created by concurrent POSTs:
// kubectl creates a List one object at a time, minutes for a large one.
//
// Who gets in: "admin" (system:masters) and "kube-proxy" (user
// system:kube-proxy, bound to the system:node-proxier role by the API
// server's own bootstrap policy: the rights kube-proxy has on a kubeadm
// cluster), both by bearer token.
//
// One control plane serves the whole test process (bun test runs every file
// in one process): sharedApiServer() starts it once (~4 s) and, for each new
// user, deletes what the previous one left (Services but the API server's own
// default/kubernetes, EndpointSlices, Nodes, Events). A suite that stops the
// API server (outages) starts its own with KubeApiServer.start().
//
// bun test fires no process "exit" event: test/harness/preload.ts closes
// every control plane after the last file; should the test process end some
// other way, its processes die with it (a parent-death signal) and a
// watchdog deletes its namespace.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { asSent } from "../fixtures/k8s.ts";
import { makeTestCert } from "./api-server.ts";
import { pythonPath, run } from "./netns.ts";

const ROOT = resolve(import.meta.dir, "../..");
const harness = import.meta.dir;

export const K8S_BIN_ENV = "KPNG_K8S_BIN";
export const SERVICE_CIDRS = "198.18.0.0/20,2001:db8:1::/112";

export interface K8sBinaries {
  dir: string;
  etcd: string;
  apiserver: string;
  kubectl: string;
  kubeProxy: string;
}

let found: K8sBinaries | string | undefined;

/** The binaries, or why there are none: KPNG_K8S_BIN (a directory holding them), else ../shared/k8s/install.sh. */
export function k8sBinaries(): K8sBinaries | string {
  if (found !== undefined) return found;
  let dir = process.env[K8S_BIN_ENV];
  if (!dir) {
    const install = join(ROOT, "../shared/k8s/install.sh");
    if (!existsSync(install)) return (found = `no real Kubernetes binaries: set ${K8S_BIN_ENV} or check out beside ../shared/k8s`);
    try {
      dir = execFileSync(install, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
        .trim()
        .split("\n")
        .at(-1)!;
    } catch (err) {
      return (found = `../shared/k8s/install.sh failed: ${String((err as { stderr?: unknown }).stderr ?? err).trim()}`);
    }
  }
  const b = {
    dir,
    etcd: join(dir, "etcd"),
    apiserver: join(dir, "kube-apiserver"),
    kubectl: join(dir, "kubectl"),
    kubeProxy: join(dir, "kube-proxy"),
  };
  const missing = Object.values(b)
    .slice(1)
    .filter((f) => !existsSync(f));
  return (found = missing.length ? `${K8S_BIN_ENV}=${dir}: missing ${missing.join(", ")}` : b);
}

/**
 * Whether suites needing the real binaries can run. Where they are absent a
 * suite skips with one line saying so; in CI (CI=true), which has them, their
 * absence fails the run instead of skipping it.
 */
export function haveK8s(suite: string): boolean {
  const b = k8sBinaries();
  if (typeof b !== "string") return true;
  if (process.env.CI) throw new Error(`${suite}: ${b} (CI must run the real-API-server tests)`);
  console.warn(`skip ${suite}: ${b}`);
  return false;
}

export function requireK8s(): K8sBinaries {
  const b = k8sBinaries();
  if (typeof b === "string") throw new Error(b);
  return b;
}

export type User = "admin" | "kube-proxy";
const TOKENS: Record<User, string> = { admin: "kpng-test-admin-token", "kube-proxy": "kpng-test-kube-proxy-token" };

/** An object as kubectl takes it (kind, apiVersion, metadata.name, ...): a manifest, or a fixture of test/fixtures/k8s.ts. */
export type K8sObject = { kind: string; apiVersion?: string; metadata: { name: string; namespace?: string }; status?: unknown };

const live = new Set<KubeApiServer>();

/** Closes every control plane still running: test/harness/preload.ts calls it after the last test file. */
export async function closeAllApiServers(): Promise<void> {
  shared = undefined;
  await Promise.all([...live].map((s) => s.close()));
}

/** Resources by kind, for the bulk POSTs and deletes. */
const PATHS: Record<string, { group: string; resource: string; namespaced: boolean }> = {
  Service: { group: "api/v1", resource: "services", namespaced: true },
  EndpointSlice: { group: "apis/discovery.k8s.io/v1", resource: "endpointslices", namespaced: true },
  Node: { group: "api/v1", resource: "nodes", namespaced: false },
  Namespace: { group: "api/v1", resource: "namespaces", namespaced: false },
  ConfigMap: { group: "api/v1", resource: "configmaps", namespaced: true },
};

export class KubeApiServer {
  /** the API server's namespace (etcd and kube-apiserver inside, on 127.0.0.1) */
  readonly ns: string;
  /** the CA of the API server's serving certificate (PEM) */
  readonly ca: string;
  /** where the test process reaches it */
  url = "";
  private etcd?: Bun.Subprocess;
  private apiserver?: Bun.Subprocess;
  private hostForward?: Bun.Subprocess;
  private readonly forwards = new Set<Bun.Subprocess>();
  private readonly namespaces = new Set(["default", "kube-system"]);
  private readonly adminKubeconfig: string;
  private closed = false;
  /**
   * Ends this control plane when the test process dies without running its
   * exit handlers (bun test, after several files at once, at times does: the
   * shared control plane was left running with its namespace). A shell
   * reading a pipe from this process: at its end, this process's death, it
   * kills what runs in the namespace and the forwards whose pids it was
   * given, and deletes the namespace and the directory. close() stops it first.
   */
  private readonly watchdog: Bun.Subprocess<"pipe", "ignore", "ignore">;

  private constructor(
    readonly bin: K8sBinaries,
    readonly dir: string,
    readonly extraArgs: string[],
  ) {
    this.ns = `kapi${Math.random().toString(36).slice(2, 8)}`;
    mkdirSync(join(dir, "certs"), { recursive: true });
    this.ca = makeTestCert(join(dir, "certs"), { san: "IP:127.0.0.1,DNS:localhost" }).cert;
    execFileSync("openssl", ["genrsa", "-out", join(dir, "sa.key"), "2048"], { stdio: "ignore" });
    writeFileSync(
      join(dir, "tokens.csv"),
      `${TOKENS.admin},admin,admin-uid,system:masters\n${TOKENS["kube-proxy"]},system:kube-proxy,kube-proxy-uid\n`,
    );
    this.adminKubeconfig = join(dir, "admin.kubeconfig");
    this.watchdog = Bun.spawn(
      [
        "sh",
        "-c",
        'pids=""; while read -r p; do pids="$pids $p"; done; kill -9 $pids $(ip netns pids "$0") 2>/dev/null; ip netns del "$0" 2>/dev/null; rm -rf "$1"',
        this.ns,
        dir,
      ],
      { stdin: "pipe", stdout: "ignore", stderr: "ignore" },
    );
  }

  /** Starts etcd and kube-apiserver in a new namespace; resolves when /readyz answers ok. `args`: more kube-apiserver flags. */
  static async start(opts: { args?: string[] } = {}): Promise<KubeApiServer> {
    const dir = join(tmpdir(), `kpng-kapi-${process.pid}-${Math.random().toString(36).slice(2, 8)}`);
    const s = new KubeApiServer(requireK8s(), dir, opts.args ?? []);
    live.add(s);
    try {
      await run(["ip", "netns", "add", s.ns]);
      await run(["ip", "-n", s.ns, "link", "set", "lo", "up"]);
      s.etcd = s.spawnIn(
        [
          s.bin.etcd,
          "--data-dir",
          join(dir, "etcd"),
          "--unsafe-no-fsync",
          "--listen-client-urls=http://127.0.0.1:2379",
          "--advertise-client-urls=http://127.0.0.1:2379",
          "--listen-peer-urls=http://127.0.0.1:2380",
          "--initial-advertise-peer-urls=http://127.0.0.1:2380",
          "--initial-cluster=default=http://127.0.0.1:2380",
          "--log-level=error",
        ],
        "etcd.log",
      );
      const fwd = await s.forward("-", 0, 6443);
      s.hostForward = fwd.proc;
      s.url = `https://127.0.0.1:${fwd.port}`;
      s.writeKubeconfig(s.adminKubeconfig, { server: s.url, user: "admin" });
      await s.startApiServer();
      return s;
    } catch (err) {
      await s.close();
      throw err;
    }
  }

  /** argv in the namespace, killed with the test process however it ends (setpriv's parent-death signal) */
  private spawnIn(argv: string[], log: string): Bun.Subprocess {
    return Bun.spawn(["ip", "netns", "exec", this.ns, "setpriv", "--pdeathsig", "KILL", "--", ...argv], {
      stdout: Bun.file(join(this.dir, log)),
      stderr: Bun.file(join(this.dir, `${log}.err`)),
      stdin: "ignore",
    });
  }

  /** (Re)starts kube-apiserver on the same etcd; resolves when ready. */
  async startApiServer(timeoutMs = 60_000): Promise<void> {
    const d = this.dir;
    this.apiserver = this.spawnIn(
      [
        this.bin.apiserver,
        "--etcd-servers=http://127.0.0.1:2379",
        "--bind-address=127.0.0.1",
        "--secure-port=6443",
        "--advertise-address=127.0.0.1",
        `--cert-dir=${join(d, "certs")}`,
        `--tls-cert-file=${join(d, "certs/server.crt")}`,
        `--tls-private-key-file=${join(d, "certs/server.key")}`,
        `--token-auth-file=${join(d, "tokens.csv")}`,
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc",
        `--service-account-key-file=${join(d, "sa.key")}`,
        `--service-account-signing-key-file=${join(d, "sa.key")}`,
        "--api-audiences=https://kubernetes.default.svc",
        `--service-cluster-ip-range=${SERVICE_CIDRS}`,
        "--endpoint-reconciler-type=none",
        // as kubeadm starts it: privileged and HostProcess pods (the DaemonSets in deploy/) are allowed
        "--allow-privileged=true",
        ...this.extraArgs,
      ],
      "kube-apiserver.log",
    );
    const end = Date.now() + timeoutMs;
    for (;;) {
      if (this.apiserver.exitCode !== null)
        throw new Error(`kube-apiserver exited (${this.apiserver.exitCode}): see ${d}/kube-apiserver.log.err`);
      const ok = await this.get("/readyz").then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok && (await this.get("/api/v1/namespaces/default/services/kubernetes")).status === 200) return;
      if (Date.now() > end) throw new Error(`kube-apiserver not ready within ${timeoutMs} ms: see ${d}/kube-apiserver.log.err`);
      await Bun.sleep(100);
    }
  }

  /** Stops kube-apiserver (etcd and the data stay): the API server gone away. */
  async stopApiServer(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    this.apiserver?.kill(signal);
    await this.apiserver?.exited;
    this.apiserver = undefined;
  }

  /** A GET from the test process, as `user`; `accept` as a client sends it. */
  get(path: string, opts: { accept?: string; user?: User } = {}): Promise<Response> {
    return fetch(this.url + path, {
      headers: { authorization: `Bearer ${TOKENS[opts.user ?? "admin"]}`, accept: opts.accept ?? "application/json" },
      tls: { ca: this.ca },
    });
  }

  /** A request from the test process as admin, JSON in and out. */
  async request(method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(this.url + path, {
      method,
      headers: {
        authorization: `Bearer ${TOKENS.admin}`,
        accept: "application/json",
        "content-type": method === "PATCH" ? "application/merge-patch+json" : "application/json",
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      tls: { ca: this.ca },
    });
  }

  /** Writes a kubeconfig: `server` as the reader reaches it (default: the test process's address). */
  writeKubeconfig(file: string, opts: { server?: string; user?: User } = {}): string {
    const user = opts.user ?? "kube-proxy";
    const kc = {
      apiVersion: "v1",
      kind: "Config",
      clusters: [
        {
          name: "test",
          cluster: { server: opts.server ?? this.url, "certificate-authority-data": Buffer.from(this.ca).toString("base64") },
        },
      ],
      users: [{ name: user, user: { token: TOKENS[user] } }],
      contexts: [{ name: "test", context: { cluster: "test", user } }],
      "current-context": "test",
    };
    writeFileSync(file, JSON.stringify(kc, null, 1), { mode: 0o600 });
    return file;
  }

  /**
   * Makes the API server reachable as 127.0.0.1:`port` inside `ns` (a node
   * namespace), for kpng there. Returns its stop (close() stops it too).
   */
  async reach(ns: string, port = 6443): Promise<() => Promise<void>> {
    const { proc } = await this.forward(ns, port, 6443);
    return async () => {
      proc.kill();
      this.forwards.delete(proc);
      await proc.exited;
    };
  }

  private async forward(from: string, port: number, target: number): Promise<{ proc: Bun.Subprocess; port: number }> {
    const proc = Bun.spawn(
      [await pythonPath(), "-u", "-S", join(harness, "ns_forward.py"), from, String(port), "127.0.0.1", String(target), this.ns],
      {
        stdout: "pipe",
        stderr: "inherit",
      },
    );
    this.forwards.add(proc);
    this.watchdog.stdin.write(`${proc.pid}\n`);
    this.watchdog.stdin.flush();
    const reader = proc.stdout.getReader();
    const first = new TextDecoder().decode((await reader.read()).value ?? new Uint8Array());
    reader.releaseLock();
    const m = /^ready (\d+)/.exec(first);
    if (!m) throw new Error(`ns_forward.py ${from} -> ${this.ns} did not start`);
    return { proc, port: Number(m[1]) };
  }

  /** Runs the real kubectl as admin; resolves with its stdout, throws with its stderr. */
  async kubectl(args: string[], stdin?: string): Promise<string> {
    return run([this.bin.kubectl, "--kubeconfig", this.adminKubeconfig, "--cache-dir", join(this.dir, "kubectl-cache"), ...args], stdin);
  }

  /** `kubectl apply` of the objects (their namespaces created first), as an operator applies a manifest. */
  async apply(...objs: K8sObject[]): Promise<void> {
    if (!objs.length) return;
    await this.ensureNamespaces(objs);
    await this.kubectl(["apply", "-f", "-"], JSON.stringify({ apiVersion: "v1", kind: "List", items: objs.map(forCreate) }));
    for (const o of objs.filter(laterStatus))
      await this.kubectl([
        "patch",
        "service",
        o.metadata.name,
        "-n",
        o.metadata.namespace ?? "default",
        "--subresource=status",
        "--type=merge",
        "-p",
        JSON.stringify({ status: o.status }),
      ]);
  }

  /** `kubectl delete` of one object (no error if it is gone). */
  async remove(kind: string, namespace: string | undefined, name: string): Promise<void> {
    await this.kubectl(["delete", kind.toLowerCase(), name, ...(namespace ? ["-n", namespace] : []), "--ignore-not-found", "--wait=false"]);
  }

  /**
   * Creates many objects at once, 16 POSTs in flight: filler for size and
   * benchmarks, where kubectl's one request after another would take minutes.
   */
  async createMany(objs: K8sObject[], concurrency = 16): Promise<void> {
    await this.ensureNamespaces(objs);
    let next = 0;
    const worker = async () => {
      while (next < objs.length) {
        const o = objs[next++];
        const p = PATHS[o.kind];
        if (!p) throw new Error(`createMany: no path for kind ${o.kind}`);
        const ns = p.namespaced ? `/namespaces/${o.metadata.namespace ?? "default"}` : "";
        const res = await this.request("POST", `/${p.group}${ns}/${p.resource}`, forCreate(o));
        if (res.status !== 201)
          throw new Error(`create ${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}: ${res.status} ${await res.text()}`);
        if (laterStatus(o)) {
          const st = await this.request("PATCH", `/${p.group}${ns}/${p.resource}/${o.metadata.name}/status`, { status: o.status });
          if (st.status !== 200) throw new Error(`status of ${o.kind} ${o.metadata.name}: ${st.status} ${await st.text()}`);
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
  }

  private async ensureNamespaces(objs: K8sObject[]): Promise<void> {
    const want = new Set(objs.map((o) => o.metadata.namespace).filter((n): n is string => !!n && !this.namespaces.has(n)));
    for (const name of want) {
      const res = await this.request("POST", "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name } });
      if (res.status !== 201 && res.status !== 409) throw new Error(`create namespace ${name}: ${res.status} ${await res.text()}`);
      this.namespaces.add(name);
    }
  }

  /** Deletes what tests create: every Service but default/kubernetes, EndpointSlices, Nodes, Events. */
  async reset(): Promise<void> {
    const del = (path: string) =>
      this.request("DELETE", path).then(async (r) => {
        if (r.status >= 300 && r.status !== 404) throw new Error(`DELETE ${path}: ${r.status} ${await r.text()}`);
      });
    // Services have no DELETE on the collection: one by one
    const svcs = (await (await this.request("GET", "/api/v1/services")).json()) as { items: K8sObject[] };
    await Promise.all(
      svcs.items
        .filter((s) => !(s.metadata.namespace === "default" && s.metadata.name === "kubernetes"))
        .map((s) => del(`/api/v1/namespaces/${s.metadata.namespace}/services/${s.metadata.name}`)),
    );
    await Promise.all(
      [...this.namespaces].flatMap((ns) => [
        del(`/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`),
        del(`/api/v1/namespaces/${ns}/events`),
      ]),
    );
    await del("/api/v1/nodes");
  }

  /** etcd, kube-apiserver and the test process's forward all running */
  alive(): boolean {
    return [this.etcd, this.apiserver, this.hostForward].every((p) => p && p.exitCode === null && !p.killed);
  }

  /** Process ids of etcd, kube-apiserver and the forwards: what to leave out of a measured process's CPU share (benches). */
  pids(): number[] {
    return [this.etcd, this.apiserver, this.hostForward, ...this.forwards].flatMap((p) => (p && p.exitCode === null ? [p.pid] : []));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    live.delete(this);
    this.watchdog.kill("SIGKILL");
    const procs = [this.apiserver, this.etcd, this.hostForward, ...this.forwards].filter((p): p is Bun.Subprocess => !!p);
    for (const p of procs) p.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.exited));
    await run(["ip", "netns", "del", this.ns]).catch(() => {});
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/**
 * What the API server takes in a create: no server-set metadata (a fixture may
 * carry some). A Node keeps its status (its addresses: a Node is created with
 * it); a Service's is cleared on create, so it is patched after (laterStatus).
 */
function forCreate(obj: K8sObject): Record<string, unknown> {
  // a fixture's endpoints name their Pod as `pod`: the targetRef they came from
  const o = (obj.kind === "EndpointSlice" ? asSent(obj as Parameters<typeof asSent>[0]) : obj) as Record<string, unknown> & K8sObject;
  const {
    resourceVersion: _rv,
    uid: _uid,
    creationTimestamp: _ct,
    generation: _g,
    managedFields: _mf,
    ...metadata
  } = o.metadata as Record<string, unknown>;
  const apiVersion = o.apiVersion ?? (o.kind === "EndpointSlice" ? "discovery.k8s.io/v1" : "v1");
  if (o.kind === "Node") return { ...o, apiVersion, metadata };
  const { status: _s, ...rest } = o;
  return { ...rest, apiVersion, metadata };
}

/** A Service with a status (load-balancer ingress) to write through the status subresource. */
const laterStatus = (o: K8sObject) => o.kind === "Service" && !!o.status && Object.keys(o.status as object).length > 0;

let shared: Promise<KubeApiServer> | undefined;

/**
 * The test process's control plane, started on first use and emptied of the
 * previous user's objects on each call. Never closed by a suite: the process
 * exit ends it.
 */
export async function sharedApiServer(): Promise<KubeApiServer> {
  const old = shared && (await shared.catch(() => undefined));
  // bun test kills a timed-out test's child processes, this control plane's too: start another
  if (old && !old.alive()) {
    await old.close();
    shared = undefined;
  }
  const first = !shared;
  shared ??= KubeApiServer.start();
  const s = await shared;
  if (!first) await s.reset();
  return s;
}

/** The API server as kpng in a node namespace reaches it, and the way back out (for afterAll). */
export interface NodeApi {
  api: KubeApiServer;
  /** a kubeconfig naming https://127.0.0.1:`port`, the address as seen from the node */
  kubeconfig: string;
  /** ends the forward into the node namespace */
  stop: () => Promise<void>;
}

/**
 * The API server (the shared one unless `api` is given) made reachable as
 * 127.0.0.1:`port` (default 6443, as on a kubeadm node) inside the node
 * namespace `ns`, with a kubeconfig for it written to `kubeconfig` as `user`
 * (default kube-proxy). What each whole-process suite against the real API
 * server does first.
 */
export async function apiForNode(
  ns: string,
  kubeconfig: string,
  opts: { api?: KubeApiServer; port?: number; user?: User } = {},
): Promise<NodeApi> {
  const api = opts.api ?? (await sharedApiServer());
  const port = opts.port ?? 6443;
  const stop = await api.reach(ns, port);
  return { api, kubeconfig: api.writeKubeconfig(kubeconfig, { server: `https://127.0.0.1:${port}`, user: opts.user }), stop };
}
