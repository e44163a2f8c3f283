// An in-process brain -> global stream -> node agent pipeline, to compare a
// node agent's state with the full brain's on the same cluster.

import { toJson } from "@bufbuild/protobuf";
import { Brain } from "../../src/core/brain/brain.ts";
import type { ClusterEvent } from "../../src/core/brain/cluster.ts";
import { kinds, type K8sObject } from "../../src/core/brain/k8s/objects.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { globalOps } from "../../src/core/api/server/global-watch.ts";
import { GlobalMirror } from "../../src/core/global/mirror.ts";
import { GlobalModel, type GlobalChange, type GlobalSnapshot } from "../../src/core/global/model.ts";
import { EndpointSchema, ServiceSchema } from "../../src/gen/localv1/services_pb.ts";
import type { WireOp } from "../../src/core/wire/ops.ts";

/** A node state as comparable JSON: every service and endpoint field, endpoint keys included, sorted; rev left out. */
export function canon(state: NodeState | null) {
  if (!state) return null;
  return { nodeIPs: state.nodeIPs, services: canonServices(state) };
}

function canonServices(state: NodeState) {
  return [...state.services.entries()]
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([key, se]) => ({
      key,
      service: toJson(ServiceSchema, se.service),
      endpoints: [...se.endpoints.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, ep]) => [k, toJson(EndpointSchema, ep)]),
    }));
}

export const upserts = (objects: K8sObject[]): ClusterEvent[] => objects.map((object) => ({ type: "upsert", object }));

/** The full brain (the model serving agents) and one agent fed from its global stream in memory. */
export class Pipeline {
  readonly full = new Brain();
  readonly agent = new Brain();
  readonly mirror = new GlobalMirror();
  readonly model: GlobalModel;
  readonly bad: string[] = [];
  /** ops of every change set sent so far */
  readonly sent: WireOp[][] = [];
  private seen: GlobalSnapshot | null = null;
  private change: { services: Set<string>; nodes: Set<string> } | null = null;

  constructor(objects: K8sObject[]) {
    this.full.apply(upserts(objects));
    for (const k of kinds) this.full.markSynced(k);
    this.full.flush();
    this.model = new GlobalModel(this.full);
    this.model.subscribe((_snap, c: GlobalChange) => {
      if (!c) this.change = null;
      else if (this.change) for (const k of ["services", "nodes"] as const) for (const x of c[k]) this.change[k].add(x);
    });
    this.sync(true);
  }

  /** Cluster events into the full brain, then the resulting change set into the agent. */
  update(events: ClusterEvent[]): WireOp[] {
    this.full.apply(events);
    this.full.flush();
    return this.sync(false);
  }

  /** Sends what changed since the last change set (everything, after a Reset) to the agent; returns the ops. */
  sync(reset: boolean): WireOp[] {
    const snap = this.model.snapshot!;
    const ops = globalOps(reset ? null : this.seen, snap, reset ? null : this.change);
    this.seen = snap;
    this.change = { services: new Set(), nodes: new Set() };
    const events = this.mirror.apply({ reset, ops }, (e) => this.bad.push(e));
    this.agent.apply(events);
    for (const k of kinds) this.agent.markSynced(k);
    this.agent.flush();
    this.sent.push(ops);
    this.lastEvents = events;
    return ops;
  }
  lastEvents: ClusterEvent[] = [];

  fullState = (node: string) => canon(this.full.view(node).state);
  agentState = (node: string) => canon(this.agent.view(node).state);
}
