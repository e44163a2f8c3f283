// The eBPF backend: socket-level load balancing for connections made on the
// node (cgroup v2 sock_addr hooks, bpf/kpng.bpf.c), composed with the nft
// backend for packets that arrive from elsewhere.
//
// Full state: each apply plans map writes for the changed services only
// (plan.ts), written in batches (executor.ts); programs are loaded once and
// stay attached through pinned links (attach.ts), so a restarted kpng only
// re-reads the pinned maps and rewrites what differs. Pins removed by
// someone else (which detaches the hooks) are reported like nft's flushed
// tables; the full sync that answers attaches again.
//
// The nft backend is composed whole, not only its external part: packets
// from other hosts to node ports, external and LB IPs (with source ranges,
// Local policies, masquerading) need its rules, and its cluster-IP rules cost
// a map element per service and still serve whatever the hooks do not see
// (processes outside --ebpf-cgroup, traffic routed to a cluster IP).

import { existsSync } from "node:fs";
import {
  type BackendContext,
  type Drift,
  errorMessage,
  type FullStateBackend,
  KpngError,
  type Logger,
  narrowDrift,
  nodeIPsOf,
  type NodeState,
  type StateChange,
} from "../../src/host/toolkit/index.ts";
import { attach, detach, ensureBpffs, resolveCgroup } from "./attach.ts";
import { printOp } from "./maps.ts";
import { ALL_MAPS, DEFAULT_BPFFS, HOOKS, linkPin, mapPin } from "./names.ts";
import { MapPlanner } from "./plan.ts";
import { kernelWriter, type MapWriter } from "./executor.ts";
import { compareMaps } from "./verify.ts";

export interface EbpfOptions {
  /** where map ops go (default: the pinned maps, after attaching) */
  writer?: MapWriter;
  /** the backend for packets from elsewhere (default: nft; null: none) */
  nft?: FullStateBackend | null;
  /** the ELF object (default: the one embedded at build time) */
  object?: Uint8Array | null;
  /** mounts a file system (default: mount(8)) */
  mount?: (type: string, dir: string) => void;
  /** how often the pins are checked for removal by someone else (default 5 s, iptables mode's canary period) */
  pinCheckMs?: number;
}

export interface SyncStats {
  full: boolean;
  ops: number;
  /** reading the maps back (a full sync) */
  readMs: number;
  planMs: number;
  writeMs: number;
}

function mountFs(type: string, dir: string) {
  const p = Bun.spawnSync(["mount", "-t", type, type, dir], { stderr: "pipe" });
  if (p.exitCode !== 0)
    throw new KpngError("unavailable", `ebpf backend: mounting ${type} on ${dir} failed: ${p.stderr.toString().trim()}`);
}

async function embeddedObject(): Promise<Uint8Array | null> {
  const { bpfObject } = await import("./gen/object.ts");
  return bpfObject === null ? null : new Uint8Array(Buffer.from(bpfObject, "base64"));
}

export class EbpfBackend implements FullStateBackend {
  readonly name = "ebpf";
  readonly kind = "full";
  last: SyncStats | undefined;
  /** whether setup loaded the programs (false: they were pinned already) */
  loaded = false;

  private readonly planner = new MapPlanner();
  private writer: MapWriter | undefined;
  private needFull = true;
  private readonly log: Logger;
  /** the object and cgroup setup attached, to attach again when the pins were removed */
  private attachedWith: { object: Uint8Array; cgroup: string } | undefined;
  private pinCheck: ReturnType<typeof setInterval> | undefined;
  /** the apply under way (settled, never rejects): `verify` reads the maps between applies */
  private applying: Promise<unknown> = Promise.resolve();
  /** a write succeeded (not a dry run): the planner's mirror says what the maps hold */
  private programmed = false;

  constructor(
    private readonly ctx: BackendContext,
    private readonly opts: EbpfOptions = {},
    private readonly nft: FullStateBackend | undefined = undefined,
  ) {
    this.log = ctx.log.child("ebpf");
    this.writer = opts.writer;
  }

  /** entries per map as last planned (benchmarks) */
  get mapEntries() {
    return this.planner.sizes;
  }

  async setup(): Promise<void> {
    await this.nft?.setup?.(this.ctx);
    if (this.ctx.config.dryRun || this.writer) return;
    const object = this.opts.object === undefined ? await embeddedObject() : this.opts.object;
    if (!object)
      throw new KpngError(
        "unavailable",
        "ebpf backend: this kpng was built without its BPF object (clang was missing at build time: install clang, llvm and libbpf-dev, then npm ci or bun run build)",
      );
    const { pinDir, cgroup: flag } = this.ctx.config.ebpf;
    const mount = this.opts.mount ?? mountFs;
    ensureBpffs(pinDir, DEFAULT_BPFFS, mount);
    const cgroup = resolveCgroup(flag || undefined, mount);
    this.attachedWith = { object, cgroup };
    this.attach();
  }

  private attach() {
    const { object, cgroup } = this.attachedWith!;
    const { pinDir } = this.ctx.config.ebpf;
    const { fds, loaded } = attach({ object, pinDir, cgroup });
    this.loaded = loaded;
    this.writer = kernelWriter(fds);
    this.log.info(loaded ? "programs attached" : "programs already attached: reusing the pinned maps", { cgroup, pinDir });
  }

  /** whether every link and map is still pinned (unpinning a link detaches its program) */
  private pinsIntact(): boolean {
    const { pinDir } = this.ctx.config.ebpf;
    return HOOKS.every((h) => existsSync(linkPin(pinDir, h))) && ALL_MAPS.every((m) => existsSync(mapPin(pinDir, m)));
  }

  async apply(state: NodeState, change: StateChange): Promise<void> {
    const run = this.applyNow(state, change);
    this.applying = run.catch(() => undefined);
    await run;
  }

  /**
   * `kpng verify`: the maps read back (one dump) and compared with what the
   * planner wrote (verify.ts), the pins checked, then the composed nft
   * backend's own check (its differences are its own, under its name, and
   * set its metric). The check of every Service sets this backend's drift metric.
   */
  async verify(service?: string): Promise<Drift[]> {
    await this.applying;
    if (!this.programmed || !this.writer)
      throw new KpngError("failed_precondition", "ebpf: nothing programmed yet (no sync applied, or --dry-run)");
    const drifts = compareMaps(this.planner.programmed(), await this.writer.dump());
    if (this.attachedWith) {
      const { pinDir } = this.ctx.config.ebpf;
      // a removed pin detaches its program (links) or leaves kpng writing a map no new program reads
      for (const path of [...HOOKS.map((h) => linkPin(pinDir, h)), ...ALL_MAPS.map((m) => mapPin(pinDir, m))])
        if (!existsSync(path)) drifts.push({ service: "", frontend: "", kind: "missing", detail: `pin ${path}` });
    }
    if (service === undefined) this.ctx.metrics?.rulesDrift(this.name, drifts.length);
    const nft = (await this.nft?.verify?.(service)) ?? [];
    return [...narrowDrift(drifts, service), ...nft];
  }

  private async applyNow(state: NodeState, change: StateChange): Promise<void> {
    this.programmed = false;
    if (this.attachedWith && !this.pinsIntact()) {
      // someone removed pins: attach again (new maps where they went), then rewrite everything
      this.attach();
      this.needFull = true;
    }
    const full = this.needFull || change === null;
    const tr = performance.now();
    const writer = this.writer;
    if (full && writer) this.planner.load(await writer.dump());
    const t0 = performance.now();
    const ips = nodeIPsOf(state, this.ctx.config);
    const ops = this.planner.plan(state, full ? null : change, ips);
    const t1 = performance.now();
    if (this.ctx.config.dryRun || !writer) {
      if (ops.length) this.ctx.out(`# ebpf: map writes\n${ops.map(printOp).join("\n")}\n`);
    } else {
      try {
        await writer.apply(ops);
      } catch (err) {
        // Some writes may have landed: start over from what the maps hold.
        this.needFull = true;
        throw new KpngError("internal", `ebpf backend: writing the maps failed: ${errorMessage(err)}`);
      }
    }
    this.needFull = false;
    this.programmed = !this.ctx.config.dryRun && writer !== undefined;
    this.last = { full, ops: ops.length, readMs: t0 - tr, planMs: t1 - t0, writeMs: performance.now() - t1 };
    this.log.debug("synced", { ...this.last });
    await this.nft?.apply(state, change);
  }

  watchRules(report: (reason: string) => void): void {
    this.nft?.watchRules?.(report);
    if (!this.attachedWith) return;
    let reported = false;
    this.pinCheck = setInterval(() => {
      const intact = this.pinsIntact();
      if (!intact && !reported) report(`ebpf: pinned programs or maps removed from ${this.ctx.config.ebpf.pinDir}`);
      reported = !intact;
    }, this.opts.pinCheckMs ?? 5000);
    this.pinCheck.unref?.();
  }

  async cleanup(): Promise<void> {
    clearInterval(this.pinCheck); // removing the pins is no change to repair
    this.programmed = false;
    await this.nft?.cleanup?.(this.ctx);
    const { pinDir } = this.ctx.config.ebpf;
    if (this.ctx.config.dryRun) {
      this.ctx.out(`# unpin ${pinDir} (links: the programs detach; maps)\n`);
      return;
    }
    const removed = detach(pinDir);
    this.log.info("removed pinned programs and maps", { pinDir, count: removed.length });
  }

  async close(): Promise<void> {
    clearInterval(this.pinCheck);
    await this.nft?.close?.();
  }
}

export async function createEbpfBackend(ctx: BackendContext, opts: EbpfOptions = {}): Promise<EbpfBackend> {
  const nft = opts.nft === undefined ? new (await import("../nft/index.ts")).NftBackend(ctx) : (opts.nft ?? undefined);
  return new EbpfBackend(ctx, opts, nft);
}
