// Kubernetes Events kpng records about itself, written as kube-proxy's event
// recorder writes them. kube-proxy builds its recorder on
// client-go/tools/events over `EventsV1()` (cmd/kube-proxy/app/server.go), so
// these are events.k8s.io/v1 Events: `regarding` (not `involvedObject`),
// `note`, `eventTime` and `reportingController`/`reportingInstance`; the API
// server refuses the deprecated core fields (`deprecatedSource`, the
// timestamps, `deprecatedCount`) on this API, so none is set.
//
// Recording is best effort: a refused or unreachable API server is a
// warning in the log, never a failed start-up (kube-proxy's broadcaster
// also drops what it cannot deliver).

import { hostname } from "node:os";
import type { Config } from "../config/config.ts";
import { errorMessage } from "../errors.ts";
import type { Logger } from "../log.ts";
import type { KubeAccess, RestClientObserver } from "../kube-http/access.ts";
import { expectOK, kubeRequest, readBody, type KubeRequest } from "../kube-http/request.ts";
import { loadKubeConfig } from "../sources/kubeconfig.ts";

/** `reportingController` of kpng's events (kube-proxy: "kube-proxy"). */
export const REPORTING_CONTROLLER = "kpng";
/** kube-proxy's `action` for what it records while starting; kept so tools filtering on it see kpng's too. */
export const ACTION_START = "StartKubeProxy";
/** the API server refuses longer notes (events.k8s.io/v1 validation) */
const NOTE_LIMIT = 1024;

export interface ObjectReference {
  kind: string;
  name: string;
  uid?: string;
  namespace?: string;
}

export type EventType = "Normal" | "Warning";

/** The fields of an events.k8s.io/v1 Event that kpng writes. */
export interface EventV1 {
  apiVersion: "events.k8s.io/v1";
  kind: "Event";
  metadata: { name: string; namespace: string };
  eventTime: string;
  reportingController: string;
  reportingInstance: string;
  action: string;
  reason: string;
  note: string;
  type: EventType;
  regarding: ObjectReference;
}

/**
 * kube-proxy's reference to its Node. It uses the node name as the UID
 * rather than fetching the Node's real one, so the event needs no extra GET.
 */
export const nodeRef = (nodeName: string): ObjectReference => ({ kind: "Node", name: nodeName, uid: nodeName });

/** RFC 3339 with exactly six fractional digits: metav1.MicroTime's wire form (the API server refuses fewer). */
export function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

export interface EventFields {
  regarding: ObjectReference;
  type: EventType;
  reason: string;
  action: string;
  note: string;
}

/**
 * The Event as client-go's events recorder makes it: named
 * `<regarding>.<unix nanoseconds in hex>`, in the regarding object's
 * namespace, or "default" for a cluster-scoped object such as a Node.
 */
export function makeEvent(f: EventFields, opts: { now?: Date; instance?: string } = {}): EventV1 {
  const now = opts.now ?? new Date();
  const note =
    Buffer.byteLength(f.note) > NOTE_LIMIT
      ? `${Buffer.from(f.note)
          .subarray(0, NOTE_LIMIT - 3)
          .toString("utf8")
          .replace(/\uFFFD$/, "")}...`
      : f.note;
  return {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: {
      name: `${f.regarding.name}.${(BigInt(now.getTime()) * 1_000_000n).toString(16)}`,
      namespace: f.regarding.namespace || "default",
    },
    eventTime: microTime(now),
    reportingController: REPORTING_CONTROLLER,
    reportingInstance: opts.instance ?? `${REPORTING_CONTROLLER}-${hostname()}`,
    action: f.action,
    reason: f.reason,
    note,
    type: f.type,
    regarding: f.regarding,
  };
}

/** POSTs one Event; rejects with the API server's Status message (HttpStatusError) or a transport error. */
export async function postEvent(request: KubeRequest, ev: EventV1, timeoutMs: number): Promise<void> {
  const res = await request({
    method: "POST",
    path: `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(ev.metadata.namespace)}/events`,
    body: ev,
    signal: AbortSignal.timeout(timeoutMs),
  });
  await readBody(await expectOK(res, [200, 201]));
}

export interface NodeEventOptions {
  /** as given to the Kubernetes source: --kubeconfig, --master, else the config file's, else in-cluster */
  kubeconfig?: string;
  master?: string;
  config: Config;
  log: Logger;
  /** given by tests; otherwise loaded like the Kubernetes source loads it */
  access?: KubeAccess;
  /** bounds how long `--once` waits for the API server at exit */
  timeoutMs?: number;
  /** where the request is reported (rest_client_* metrics) */
  restClient?: RestClientObserver;
}

/** Records an event on this proxy's Node. Never rejects: failures are logged as warnings. */
export async function recordNodeEvent(opts: NodeEventOptions, f: Omit<EventFields, "regarding">): Promise<void> {
  const { config, log } = opts;
  const ev = makeEvent({ ...f, regarding: nodeRef(config.nodeName) });
  try {
    const access = opts.access ?? loadKubeConfig({ kubeconfig: opts.kubeconfig || config.kubeconfig || undefined, master: opts.master });
    await postEvent(kubeRequest({ ...access, observe: opts.restClient ?? access.observe }), ev, opts.timeoutMs ?? 5000);
    log.debug("event recorded", { reason: ev.reason, node: config.nodeName, name: ev.metadata.name });
  } catch (err) {
    log.warn("could not record event", { reason: ev.reason, node: config.nodeName, error: errorMessage(err) });
  }
}

/**
 * A backend's start-up warning as a Warning event on this Node, as kube-proxy
 * records its IPVS deprecation (KEP-5495). The reason and note come from the
 * backend (Backend.nodeWarning): the core knows no backend.
 */
export async function recordStartWarning(opts: NodeEventOptions, warning: { reason: string; note: string }): Promise<void> {
  await recordNodeEvent(opts, { type: "Warning", reason: warning.reason, action: ACTION_START, note: warning.note });
}
