// The Kubernetes source: Services, EndpointSlices (discovery.k8s.io/v1) and
// this node's Node, listed and watched with kube-proxy's selectors, fed to
// the brain through the ingest (ingest.ts), which batches recomputation: at
// most once per minSyncPeriod when the operator set one, else paced by cost.
//
// Objects are cut down to what kpng reads (the schemas' output) before they
// are compared, so a Node heartbeat or a relist that brings back the same
// objects with new resourceVersions costs nothing downstream.

import type { Brain } from "../brain/brain.ts";
import type { Config } from "../config/config.ts";
import { objectName, parseObject, type K8sObject, type Kind, type ParseResult } from "../brain/k8s/objects.ts";
import { HEADLESS_LABEL } from "../brain/model/endpoints.ts";
import { SERVICE_PROXY_NAME_LABEL } from "../brain/model/service.ts";
import type { Logger } from "../log.ts";
import type { KubeAccess, RestClientObserver } from "../kube-http/access.ts";
import { Ingest } from "./ingest.ts";
import { objectId } from "./listing.ts";
import { ReadLog } from "./read-log.ts";
import { acceptHeader } from "../kube-http/content.ts";
import { kubeRequest, readObject } from "../kube-http/request.ts";
import { DEFAULT_BACKOFF, Reflector, type Backoff, type ReflectorSink, type ResourceSpec } from "./kube-reflector.ts";
import { loadKubeConfig } from "./kubeconfig.ts";
import { protobufObject, UNDECODABLE } from "./protobuf/envelope.ts";

export interface KubeSourceOptions {
  kubeconfig?: string;
  master?: string;
  brain: Brain;
  log: Logger;
  config: Config;
  /** every Node, not only this one: a central brain serves every node's agent (zones, addresses) */
  allNodes?: boolean;
  /** reconnect delays (tests shrink them) */
  backoff?: Backoff;
  /** where API requests are reported (rest_client_* metrics) */
  restClient?: RestClientObserver;
}

/** What the source has seen, for metrics. */
export interface SourceStats {
  /** objects received from the API server (list items and watch events), by kind */
  events: Record<Kind, number>;
  /** watch connections currently open */
  watchers: number;
  /** lists repeated after 410 Gone */
  relists: number;
  /** brain recomputations run */
  flushes: number;
  /** watch events that did not decode, and watch streams whose framing broke, by kind (kube-reflector.ts) */
  readonly decodeErrors: Record<Kind, number>;
  /** kinds whose watch events keep failing to decode (DECODE_FAILURES_STALE in a row): not followed, /healthz 503 */
  readonly stale: Kind[];
}

export interface KubeSource {
  close(): void;
  readonly stats: SourceStats;
  /** resolves once every kind has been listed */
  readonly synced: Promise<void>;
}

/** kube-proxy's informer selectors (not another proxy's services, not headless ones), asked in its content type. */
export function resourceSpecs(cfg: Config, opts: { allNodes?: boolean } = {}): Record<Kind, ResourceSpec> {
  // "absent, or equal to --service-proxy-name" has no label-selector form: with a
  // name, watch every service and let the brain (model/service.ts isProxied) choose.
  const labelSelector = [`!${HEADLESS_LABEL}`, ...(cfg.serviceProxyName ? [] : [`!${SERVICE_PROXY_NAME_LABEL}`])].join(",");
  const accept = acceptHeader(cfg.kubeProxy.clientConnection);
  return {
    Service: { path: "/api/v1/services", labelSelector, accept },
    EndpointSlice: { path: "/apis/discovery.k8s.io/v1/endpointslices", labelSelector, accept },
    // A node proxy needs only its own Node's labels (zone) and addresses; a central brain everyone's.
    Node: opts.allNodes
      ? { path: "/api/v1/nodes", accept }
      : { path: "/api/v1/nodes", fieldSelector: `metadata.name=${cfg.nodeName}`, accept },
  };
}

const kindsInOrder: readonly Kind[] = ["Node", "Service", "EndpointSlice"];

/** One Node by name (JSON or protobuf, by the answer's Content-Type); null when absent or unreachable. */
async function getNode(access: KubeAccess, name: string, accept: string | undefined): Promise<Record<string, unknown> | null> {
  try {
    const res = await kubeRequest(access)({
      path: `/api/v1/nodes/${encodeURIComponent(name)}`,
      accept,
      signal: AbortSignal.timeout(10_000),
    });
    if (res.statusCode !== 200) {
      res.resume();
      return null;
    }
    return await readObject(res, protobufObject);
  } catch {
    return null;
  }
}

/** `service default/web: protobuf: a field runs past the end of its message` */
function undecodable(kind: Kind, raw: Record<string, unknown>): ParseResult {
  return {
    ok: false,
    error: `${objectName({ kind, metadata: raw.metadata as never })}: protobuf: ${String(raw[UNDECODABLE])}`,
    reason: "malformed",
  };
}

/** The id the ingest and the listing know an object by, read from its metadata alone (it may not validate). */
function idOf(kind: Kind, raw: Record<string, unknown>): string {
  const meta = (raw.metadata ?? {}) as { namespace?: string; name?: string };
  return objectId(kind, kind === "Node" ? "" : meta.namespace || "default", meta.name ?? "");
}

/**
 * Starts list/watch of the three kinds and resolves once this node's Node has
 * been listed (its addresses are the default node IPs), retrying with backoff
 * for as long as the API server cannot be reached.
 */
export async function startKubeSource(opts: KubeSourceOptions): Promise<KubeSource> {
  const { log, config } = opts;
  const access = {
    ...loadKubeConfig({ kubeconfig: opts.kubeconfig || config.kubeconfig || undefined, master: opts.master }),
    observe: opts.restClient,
  };
  // The operator's minSyncPeriod, or none: each flush then paced by its own cost (pacing.ts).
  const ingest = new Ingest(opts.brain, { type: "paced", minSyncPeriodMs: config.minSyncPeriodSeconds * 1000 });
  const reflectors: Reflector[] = [];
  const stats = sourceStats(ingest, reflectors);
  const reader = new ObjectReader(log, ingest);
  const specs = resourceSpecs(config, { allNodes: opts.allNodes });
  reflectors.push(
    ...kindsInOrder.map((kind) =>
      new Reflector(
        access,
        kind,
        specs[kind],
        kindSink(kind, { ingest, stats, reader, log }),
        log,
        opts.backoff ?? DEFAULT_BACKOFF,
      ).start(),
    ),
  );
  log.info("watching the API server", { server: access.server, node: config.nodeName });
  if (!opts.allNodes && config.nodeName) takeOwnNodeEarly(access, config.nodeName, specs.Node.accept, { ingest, reader });

  const close = () => {
    for (const r of reflectors) r.close();
    ingest.close();
  };
  await reflectors[0].synced;
  return { close, stats, synced: Promise.all(reflectors.map((r) => r.synced)).then(() => undefined) };
}

/** The stats of a source whose reflectors (one per kind, in kindsInOrder) fill `reflectors` as they start. */
function sourceStats(ingest: Ingest, reflectors: readonly Reflector[]): SourceStats {
  return {
    events: { Service: 0, EndpointSlice: 0, Node: 0 },
    watchers: 0,
    get relists() {
      return reflectors.reduce((n, r) => n + r.relists, 0);
    },
    get flushes() {
      return ingest.flushes;
    },
    get decodeErrors() {
      const out: Record<Kind, number> = { Service: 0, EndpointSlice: 0, Node: 0 };
      reflectors.forEach((r, i) => (out[kindsInOrder[i]] = r.decodeErrors));
      return out;
    },
    get stale() {
      return kindsInOrder.filter((_, i) => reflectors[i]?.stale);
    },
  };
}

/**
 * Raw objects (list items, watch events, the early Node) into the brain's
 * objects. An invalid object is skipped: the brain's index and the listing
 * still hold its last valid version (if any), which stays in place. Bad input
 * tears nothing down.
 */
class ObjectReader {
  /** time spent validating, per kind, during the current list (start-up log) */
  private readonly validateMs: Record<Kind, number> = { Service: 0, EndpointSlice: 0, Node: 0 };
  private readonly said: ReadLog;

  constructor(log: Logger, ingest: Ingest) {
    this.said = new ReadLog(log, ingest);
  }

  /** The object, or null when it does not decode or validate (then said on the log). */
  parse(kind: Kind, raw: Record<string, unknown>): K8sObject | null {
    const t0 = performance.now();
    // protobuf bytes that did not decode: refused like an object that does not validate
    const res: ParseResult = UNDECODABLE in raw ? undecodable(kind, raw) : parseObject(raw, kind); // list items carry no kind
    this.validateMs[kind] += performance.now() - t0;
    // the well-formed majority carries no notes: nothing to say (unless something was said before)
    if (!res.ok || res.notes || !this.said.quiet) this.said.report(kind, idOf(kind, raw), res);
    return res.ok ? res.object : null;
  }

  /** The object is gone: if it comes back, what is wrong with it is said again. */
  forget(kind: Kind, raw: Record<string, unknown>): void {
    this.said.forget(idOf(kind, raw));
  }

  /** The time spent validating `kind` since the last call. */
  takeValidateMs(kind: Kind): number {
    const ms = this.validateMs[kind];
    this.validateMs[kind] = 0;
    return ms;
  }
}

interface SinkParts {
  ingest: Ingest;
  stats: SourceStats;
  reader: ObjectReader;
  log: Logger;
}

/** What one kind's reflector hands over (lists and watch events), into the ingest. */
function kindSink(kind: Kind, { ingest, stats, reader, log }: SinkParts): ReflectorSink {
  /**
   * ids in the list under way, valid or not: what is not among them is gone.
   * null when the index held nothing of kind as the list began (the first
   * list): nothing can be gone, and an id per object would be collected and
   * checked at start-up for nothing; nor is there anything to compare the
   * objects with (Ingest.add).
   */
  let present: Set<string> | null = null;
  return {
    page(items, first) {
      // a list that failed midway left its objects in the index and its ids here
      if (first) present = ingest.count(kind) ? new Set() : null;
      stats.events[kind] += items.length;
      for (const raw of items) {
        const obj = reader.parse(kind, raw);
        if (!present) {
          if (obj) ingest.add(obj);
          continue;
        }
        present.add(idOf(kind, raw));
        if (obj) ingest.upsert(obj);
      }
    },
    listed(list) {
      if (present) ingest.missing(kind, present);
      present = null;
      const validateMs = reader.takeValidateMs(kind);
      if (!ingest.isSynced) {
        log.info("listed", {
          kind,
          objects: list.items,
          via: list.via,
          pages: list.pages,
          as: list.encoding,
          ms: Math.round(list.ms),
          decodeMs: Math.round(list.decodeMs),
          validateMs: Math.round(validateMs),
        });
      }
      ingest.synced(kind);
      ingest.changed();
    },
    event(type, raw) {
      stats.events[kind]++;
      if (type === "DELETED") {
        const meta = (raw.metadata ?? {}) as { namespace?: string; name?: string };
        if (!meta.name) return;
        reader.forget(kind, raw);
        ingest.delete(kind, kind === "Node" ? "" : meta.namespace || "default", meta.name);
      } else {
        const obj = reader.parse(kind, raw);
        if (!obj) return;
        ingest.upsert(obj);
      }
      ingest.changed();
    },
    watching(delta) {
      stats.watchers += delta;
    },
  };
}

/**
 * kube-proxy GETs its own Node as it starts (getNodeIPs), besides its informers: so does kpng, and
 * the Node's addresses may come before its list does. Taken only while the list has not brought it
 * (an answer overtaken by the list could be older than what the list holds).
 */
function takeOwnNodeEarly(
  access: KubeAccess,
  nodeName: string,
  accept: string | undefined,
  { ingest, reader }: Pick<SinkParts, "ingest" | "reader">,
): void {
  void getNode(access, nodeName, accept).then((raw) => {
    if (!raw || ingest.last("Node", "", nodeName)) return;
    const obj = reader.parse("Node", raw);
    if (!obj) return;
    ingest.upsert(obj);
    ingest.changed();
  });
}
