// What the introspection API (src/core/introspect) asks of the backends this
// process runs: the revision each last applied and when (told by the feed's
// onSynced/onError), and their kernel read-back (Backend.verify).

import { create } from "@bufbuild/protobuf";
import { BackendSyncSchema, BackendVerifySchema, type BackendSync, type BackendVerify } from "../gen/introspectv1/introspect_pb.ts";
import type { NodeState } from "../core/brain/state.ts";
import { errorMessage } from "../core/errors.ts";
import type { IntrospectSource } from "../core/introspect/routes.ts";
import type { Backend } from "./backend.ts";

interface Held {
  rev: number;
  appliedMs: number;
  seconds: number;
  error: string;
}

export class BackendsIntrospection implements IntrospectSource {
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly list: readonly Backend[],
    readonly nodePortAddresses: readonly string[],
    /** the clock (tests) */
    private readonly now: () => number = Date.now,
  ) {
    for (const b of list) this.held.set(b.name, { rev: 0, appliedMs: 0, seconds: 0, error: "" });
  }

  /** the feed applied `state` to `backend` */
  synced(backend: Backend, state: NodeState, seconds: number): void {
    this.held.set(backend.name, { rev: state.rev, appliedMs: this.now(), seconds, error: "" });
  }

  /** a sync failed: the backend still holds its last revision (as far as kpng knows), and a full sync follows */
  failed(backend: Backend, err: unknown): void {
    const h = this.held.get(backend.name);
    if (h) h.error = errorMessage(err);
  }

  backends(): BackendSync[] {
    return this.list.map((b) => {
      const h = this.held.get(b.name)!;
      return create(BackendSyncSchema, {
        name: b.name,
        revision: BigInt(h.rev),
        appliedUnixMs: BigInt(h.appliedMs),
        syncSeconds: h.seconds,
        error: h.error,
      });
    });
  }

  /** every backend's read-back at once; one that cannot read back says so (it is never reported clean) */
  verify(service?: string): Promise<BackendVerify[]> {
    return Promise.all(
      this.list.map(async (b) => {
        if (!b.verify) return create(BackendVerifySchema, { name: b.name, supported: false });
        try {
          const drifts = await b.verify(service);
          return create(BackendVerifySchema, { name: b.name, supported: true, drifts });
        } catch (err) {
          return create(BackendVerifySchema, { name: b.name, supported: true, error: errorMessage(err) });
        }
      }),
    );
  }
}
