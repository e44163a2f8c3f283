// A brain fed directly with Kubernetes objects, for API tests that need to
// change the cluster at will.

import { Brain } from "../../src/core/brain/brain.ts";
import { kinds, parseObject } from "../../src/core/brain/k8s/objects.ts";
import type { Kind } from "../../src/core/brain/k8s/objects.ts";
import { genCluster, type GenOptions } from "./gen-cluster.ts";

export function upsertEvents(items: unknown[]) {
  return items.map((raw) => {
    const r = parseObject(raw);
    if (!r.ok) throw new Error(`fixture object rejected: ${"error" in r ? r.error : "ignored"}`);
    return { type: "upsert" as const, object: r.object };
  });
}

/** A synced brain holding a generated cluster. */
export function brainWith(opts: GenOptions): Brain {
  const brain = new Brain();
  brain.apply(upsertEvents(genCluster(opts).items));
  for (const k of kinds) brain.markSynced(k);
  brain.flush();
  return brain;
}

/** Upserts objects and publishes the resulting revisions. */
export function upsert(brain: Brain, ...items: unknown[]): void {
  brain.apply(upsertEvents(items));
  brain.flush();
}

export function remove(brain: Brain, kind: Kind, namespace: string, name: string): void {
  brain.apply([{ type: "delete", kind, namespace, name }]);
  brain.flush();
}

/** The generated objects of service i, as genCluster makes them (index 0 Service, 1 EndpointSlice). */
export function serviceObjects(opts: GenOptions, i: number): [Record<string, any>, Record<string, any>] {
  const items = genCluster({ ...opts, services: i + 1 }).items;
  const n = items.length;
  return [structuredClone(items[n - 2]) as Record<string, any>, structuredClone(items[n - 1]) as Record<string, any>];
}
