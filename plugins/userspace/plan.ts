// The plan step of the userspace backend, as plan.ts is in ipvs, ebpf, nft
// and iptables: each service's frontends as last planned (frontends.ts
// renders them) against the services a change names, turned into what the
// relays must do: the frontends touched (their new value, or undefined when
// gone) and those gone. Pure: the backend acts on the result (relays
// started, updated, closed; bind mode's local routes; redirect's table).

import type { NodeState, StateChange } from "../../src/host/toolkit/index.ts";
import { type Frontend, type PlanOptions, planService } from "./frontends.ts";

export interface FrontendChanges {
  /** by frontend key: the new value, or undefined for a frontend that is gone */
  touched: Map<string, Frontend | undefined>;
  /** frontends gone (not replaced under the same key) */
  gone: Frontend[];
  /** service ports not proxied, each reason once per planner (the backend logs them) */
  skipped: string[];
}

export class FrontendPlanner {
  /** each service's frontends as last planned: a partial sync re-plans only the services that changed */
  private readonly planned = new Map<string, Frontend[]>();
  /** the same frontends by frontend key */
  readonly frontends = new Map<string, Frontend>();
  /** service IPs (not node IPs) -> how many frontends use them: the IPs bind mode makes local */
  readonly serviceIPs = new Map<string, number>();
  /** the set of service IPs changed since the last takeIPsChanged() */
  private ipsChanged = false;
  private readonly skippedSeen = new Set<string>();
  /** the node IPs node ports listened on at the last plan */
  nodeIPs: readonly string[] | undefined;

  /**
   * Re-plans the services in `change` (null: all, and those planned before)
   * and returns their frontends by key and the frontends gone.
   */
  plan(state: NodeState, change: StateChange, opts: PlanOptions): FrontendChanges {
    const keys = change ?? new Set([...this.planned.keys(), ...state.services.keys()]);
    const touched = new Map<string, Frontend | undefined>();
    const old = new Map<string, Frontend>();
    const skipped: string[] = [];
    // what the services had goes first: a frontend key may pass from one service to another in one change
    for (const key of keys) {
      for (const f of this.planned.get(key) ?? []) {
        touched.set(f.key, undefined);
        old.set(f.key, f);
        this.frontends.delete(f.key);
        this.countIP(f, -1);
      }
      this.planned.delete(key);
    }
    for (const key of keys) {
      const entry = state.services.get(key);
      if (!entry) continue;
      const p = planService(key, entry, opts);
      for (const s of p.skipped) {
        if (this.skippedSeen.has(s)) continue;
        this.skippedSeen.add(s);
        skipped.push(s);
      }
      for (const f of p.frontends) {
        touched.set(f.key, f);
        this.frontends.set(f.key, f);
        this.countIP(f, 1);
      }
      this.planned.set(key, p.frontends);
    }
    this.nodeIPs = opts.nodeIPs;
    return { touched, gone: [...old.values()].filter((f) => touched.get(f.key) === undefined), skipped };
  }

  /** whether the set of service IPs changed since the last call */
  takeIPsChanged(): boolean {
    const changed = this.ipsChanged;
    this.ipsChanged = false;
    return changed;
  }

  private countIP(f: Frontend, by: 1 | -1) {
    if (f.kind === "nodeport") return;
    const n = (this.serviceIPs.get(f.ip) ?? 0) + by;
    if (n > 0) this.serviceIPs.set(f.ip, n);
    else this.serviceIPs.delete(f.ip);
    if (n === 0 || (n === 1 && by === 1)) this.ipsChanged = true;
  }
}
