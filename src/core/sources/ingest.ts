// The one way into the brain, for every source (the API server, a file, a
// central brain's stream): objects in, a mark once a kind is completely
// known, and a flush policy that decides when the brain recomputes. Sources
// only read and decode; what an object means to the index, and when the
// brain works, is decided here and in the brain, once.

import type { Brain } from "../brain/brain.ts";
import type { ClusterEvent } from "../brain/cluster.ts";
import { kinds, type DropReason, type K8sObject, type Kind } from "../brain/k8s/objects.ts";
import { pauseAfter } from "../pacing.ts";
import { Listing } from "./listing.ts";

/**
 * When the brain recomputes after a change:
 * - `at-once`: in the same turn (a file re-read, a brain's change set: each
 *   is one whole change already);
 * - `paced`: soon, batching what arrives meanwhile: at most once per
 *   `minSyncPeriodMs` when the operator set one, else paced by the cost of
 *   the last flush (pacing.ts).
 */
export type FlushPolicy = { type: "at-once" } | { type: "paced"; minSyncPeriodMs: number };

export class Ingest {
  private readonly listing: Listing;
  private timer?: ReturnType<typeof setTimeout>;
  private nextAt = -Infinity;
  /** brain recomputations run */
  flushes = 0;

  constructor(
    private readonly brain: Brain,
    private readonly policy: FlushPolicy,
  ) {
    this.listing = new Listing(brain.cluster);
  }

  /** one object as it is now (a watch event, a list item) */
  upsert(object: K8sObject): void {
    this.brain.apply(this.listing.upsert(object));
  }

  /**
   * An object of a list into an index that held nothing of its kind as the
   * list began: there is nothing to compare it with (a first list is
   * 10,000s of objects, at start-up).
   */
  add(object: K8sObject): void {
    this.brain.applyEvent({ type: "upsert", object });
  }

  delete(kind: Kind, namespace: string, name: string): void {
    this.brain.apply(this.listing.delete(kind, namespace, name));
  }

  /** everything of `kind` there is now: what it lacks is gone */
  replace(kind: Kind, objects: readonly K8sObject[]): void {
    this.brain.apply(this.listing.replace(kind, objects));
  }

  /** a complete list held objects with these ids (`objectId`) only: the others are gone */
  missing(kind: Kind, present: ReadonlySet<string>): void {
    this.brain.apply(this.listing.missing(kind, present));
  }

  /** events a source has already diffed (a central brain's change set) */
  events(events: Iterable<ClusterEvent>): void {
    this.brain.apply(events);
  }

  /** every object of `kind` has been read once: the brain may publish once all kinds are */
  synced(kind: Kind): void {
    this.brain.markSynced(kind);
  }

  syncedAll(): void {
    for (const k of kinds) this.brain.markSynced(k);
  }

  get isSynced(): boolean {
    return this.brain.isSynced;
  }

  /** how many objects of `kind` the brain holds */
  count(kind: Kind): number {
    return this.brain.cluster.count(kind);
  }

  /** the version of an object the brain holds: a refused newer version leaves it in place */
  last(kind: Kind, namespace: string, name: string): K8sObject | undefined {
    return this.brain.cluster.get(kind, namespace, name);
  }

  /** an object the source refused (kpng_objects_dropped_total) */
  dropped(kind: Kind, reason: DropReason): void {
    this.brain.dropped.add(kind, reason);
  }

  /** Something changed: the brain recomputes as the policy says (nothing before every kind is synced). */
  changed(): void {
    if (this.policy.type === "at-once") {
      this.flush();
      return;
    }
    if (this.timer) return;
    const minMs = this.policy.minSyncPeriodMs;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        const t0 = performance.now();
        if (!this.flush()) return;
        const t1 = performance.now();
        // The first flush computes everything once the lists are in: like a
        // full sync (feed.ts), its cost does not pace the changes after it.
        if (minMs > 0) this.nextAt = t1 + minMs;
        else if (this.flushes > 1) this.nextAt = t1 + pauseAfter(t1 - t0);
      },
      Math.max(0, this.nextAt - performance.now()),
    );
  }

  close(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private flush(): boolean {
    if (!this.brain.isSynced) return false;
    this.brain.flush();
    this.flushes++;
    return true;
  }
}
