// One list/watch loop against the API server, the way client-go 1.36's
// reflector runs it: the list streamed as a watch (sendInitialEvents: every
// object as an ADDED event, then a BOOKMARK marking the end; client-go's
// WatchListClient, on by default since 1.35), or, from an API server that
// refuses that, paginated GETs (the first at resourceVersion "0", which the
// API server answers from its watch cache; a relist after 410 Gone at "",
// the latest state); then watch from the list's resourceVersion;
// resume from the last resourceVersion seen when a watch ends or drops; list
// again only on 410 Gone; back off exponentially (with jitter, capped) while
// the server cannot be reached. Nothing here ever clears what was listed: a
// server that is down leaves the last known cluster in place.
//
// A watch event kpng cannot decode never stalls the watch (issue 33: it used
// to end the watch, which resumed from the same resourceVersion and failed on
// the same event forever). What is done depends on what broke:
// - one event's bytes (a protobuf frame whose length prefix is sound, a JSON
//   line, an object that does not decode): the event is skipped, logged and
//   counted, and the watch goes on with the next one. The stream itself is
//   sound, and every other object keeps being followed; a relist per bad
//   event would fetch the whole kind again each time (10k objects), and
//   with a decoder that fails on what this server writes, forever. An object
//   that did not decode but whose name could be read is refused by name
//   (kube.ts); its last valid version stays.
// - the framing (a frame length no frame can have): nothing after it can be
//   trusted. The stream is dropped and the kind listed again (the latest
//   state), after the usual backoff.
// - during a streamed list: a skipped event would be an object missing from
//   the list, taken as deleted; the list fails and is listed again by pages,
//   whose items are refused one by one, by name.
// DECODE_FAILURES_STALE such failures in a row, with no watch event decoded
// between them, make the kind `stale`: kpng is not following it (the same
// failure again and again), and /healthz says so (health.ts) until a watch
// event of that kind decodes again.

import type { IncomingMessage } from "node:http";
import { StringDecoder } from "node:string_decoder";
import { errorMessage } from "../errors.ts";
import type { Logger } from "../log.ts";
import { encodingOf } from "../kube-http/content.ts";
import { expectOK, kubeGet, type KubeGet } from "../kube-http/request.ts";
import type { KubeAccess } from "../kube-http/access.ts";
import { ListDecoder, protobufObject, UNDECODABLE, WatchDecoder, type WatchEvent } from "./protobuf/envelope.ts";
import { ProtoError } from "./protobuf/wire.ts";

export interface ResourceSpec {
  /** e.g. `/api/v1/services` */
  path: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** the Accept header of lists and watches (kube-content.ts acceptHeader); default JSON */
  accept?: string;
}

export interface ReflectorSink {
  /**
   * Items of a list (the first list, or a relist after 410 Gone) in order,
   * handed over as they arrive (a protobuf item as soon as its bytes are in,
   * a JSON page when it is whole) while the next page is on its way:
   * decoding and validation overlap the API server's work. `first` marks
   * the first batch of a list. A list that fails midway starts over; its
   * items may come again.
   */
  page(items: Record<string, unknown>[], first: boolean): void;
  /** the list is complete: whatever none of its pages held is gone */
  listed(stats: ListStats): void;
  /** one watch event: ADDED, MODIFIED, DELETED */
  event(type: string, object: Record<string, unknown>): void;
  /** watch connections opened or closed (+1 / -1) */
  watching(delta: number): void;
}

/** What a list cost, for the start-up log. */
export interface ListStats {
  items: number;
  pages: number;
  /** wall time from the first request to the last page handed over */
  ms: number;
  /** of which decoding (JSON or protobuf) */
  decodeMs: number;
  /** how the answers came */
  encoding: string;
  /** "watch": streamed (sendInitialEvents); "pages": GETs */
  via: "watch" | "pages";
}

export interface Backoff {
  initialMs: number;
  maxMs: number;
}

/** client-go's reflector backoff: 800ms doubling up to 30s; jittered down by up to half so it stays bounded. */
export const DEFAULT_BACKOFF: Backoff = { initialMs: 800, maxMs: 30_000 };

/** watch events of one kind that failed to decode in a row after which the kind is stale (/healthz 503) */
export const DECODE_FAILURES_STALE = 5;

const PAGE = 500;
const LIST_TIMEOUT_MS = 60_000;

type Outcome =
  | { type: "gone" }
  | { type: "error"; err: unknown; timeout: boolean }
  | { type: "closed"; events: number; ms: number }
  | { type: "refused"; err: unknown }
  /** the stream's framing broke: list again */
  | { type: "corrupt"; err: unknown };

/** the annotation of the BOOKMARK that ends a streamed list's initial events */
export const INITIAL_EVENTS_END = "k8s.io/initial-events-end";

const statusOf = (err: unknown): number | undefined => {
  const e = err as { statusCode?: unknown; code?: unknown };
  return typeof e?.statusCode === "number" ? e.statusCode : typeof e?.code === "number" ? e.code : undefined;
};

export class Reflector {
  /** resourceVersion to resume from; "" = list first */
  resourceVersion = "";
  relists = 0;
  /** watch events that did not decode (skipped, or refused by name), and watch streams whose framing broke */
  decodeErrors = 0;
  /** decode failures since the last watch event that decoded */
  private decodeFailuresInRow = 0;
  /**
   * The resourceVersion the next list asks for, as client-go's reflector:
   * "0" (any, from the API server's watch cache: no read from etcd) until
   * the server said 410 Gone, then "" (the latest, a consistent read).
   */
  private listFrom = "0";
  /**
   * List by a watch with sendInitialEvents, until the API server refuses it
   * (then by pages, as client-go falls back). Kept as the default on
   * measure (issue 40, bench startup against kube-apiserver 1.36.2, paged
   * lists interleaved with streamed ones): at 1,000 services pages came in
   * sooner (list phase: pages 1.0-2.1 s, streamed 2.2-2.6 s, a first cold
   * run aside), at 10,000 neither did (pages 3.1-7.6 s, streamed 4.1-10.9
   * s, six runs each on a loaded host). The API server writes a streamed
   * list slower than the same list from its cache (10,000 slices: 4.8 s
   * against 2.5 s to the last byte), but kpng decodes events as they come;
   * a list from the cache is built whole in the API server's memory before
   * its first byte (50,000 slices: 22 s, 90 MB), the cost client-go's
   * watch-list exists to spare it.
   */
  private streamList = true;
  private stopped = false;
  private request?: AbortController;
  private readonly stop = new AbortController();
  private failures = 0;
  private sleeping?: { timer: ReturnType<typeof setTimeout>; wake: () => void };
  private readonly get: KubeGet;
  private readonly listedOnce = Promise.withResolvers<void>();

  constructor(
    access: KubeAccess,
    private readonly kind: string,
    private readonly spec: ResourceSpec,
    private readonly sink: ReflectorSink,
    private readonly log: Logger,
    private readonly backoff: Backoff = DEFAULT_BACKOFF,
  ) {
    this.get = kubeGet(access, spec.accept);
  }

  /** DECODE_FAILURES_STALE decode failures in a row: kpng is not following this kind */
  get stale(): boolean {
    return this.decodeFailuresInRow >= DECODE_FAILURES_STALE;
  }

  /** resolves after the first successful list */
  get synced(): Promise<void> {
    return this.listedOnce.promise;
  }

  start(): this {
    void this.run();
    return this;
  }

  close(): void {
    this.stopped = true;
    this.stop.abort();
    this.request?.abort();
    this.get.close();
    if (this.sleeping) {
      clearTimeout(this.sleeping.timer);
      this.sleeping.wake();
    }
  }

  private async run() {
    while (!this.stopped) {
      let out: Outcome | undefined;
      if (!this.resourceVersion && this.streamList) {
        out = await this.watchOnce(true);
        if (this.stopped) return;
        if (!this.resourceVersion) {
          // As client-go: a streamed list that fails is followed at once by a list by pages,
          // and the next list is streamed again; one the server refuses (its WatchList gate off)
          // is not asked for again until kpng restarts.
          if (out.type === "refused") {
            this.log.info("the API server does not stream lists (sendInitialEvents), listing page by page", {
              kind: this.kind,
              error: errorMessage(out.err),
            });
            this.streamList = false;
          } else if ((out.type === "error" && !out.timeout) || out.type === "corrupt") {
            this.log.warn("streamed list failed, listing page by page", {
              kind: this.kind,
              error: errorMessage(out.err) || String(statusOf(out.err) ?? "error"),
            });
          }
          out = undefined;
        }
      }
      if (!this.resourceVersion) {
        try {
          await this.list();
          this.failures = 0;
          this.listedOnce.resolve();
        } catch (err) {
          if (this.stopped) return;
          // An expired continue token is a 410 too: start the list over from the latest state, no need to wait.
          if (statusOf(err) === 410) {
            this.listFrom = "";
            continue;
          }
          await this.retryLater("list failed", err);
          continue;
        }
      }
      out ??= await this.watchOnce();
      if (this.stopped) return;
      if (out.type === "gone") {
        this.log.info("resourceVersion too old, listing again", { kind: this.kind, resourceVersion: this.resourceVersion });
        this.resourceVersion = "";
        this.listFrom = "";
        this.relists++;
      } else if (out.type === "corrupt") {
        this.resourceVersion = "";
        this.listFrom = "";
        await this.retryLater("watch stream unreadable, listing again", out.err);
      } else if (out.type === "error" || out.type === "refused") {
        // The client's inactivity timeout already waited: reconnect at once, from where we were.
        if (out.type === "error" && out.timeout) continue;
        await this.retryLater("watch failed", out.err);
      } else if (out.events === 0 && out.ms < 1000) {
        // A server that ends every watch at once must not make us spin.
        await this.retryLater("watch closed immediately", null);
      } else this.failures = 0;
    }
  }

  /**
   * A watch event (or stream) that did not decode: counted; logged with what
   * broke, unless it is an object that kube.ts refuses by name (`logged`).
   */
  private undecoded(error: string, logged = false) {
    this.decodeErrors++;
    this.decodeFailuresInRow++;
    if (!logged) this.log.warn("watch event not decoded, skipped", { kind: this.kind, error, inRow: this.decodeFailuresInRow });
    if (this.decodeFailuresInRow === DECODE_FAILURES_STALE)
      this.log.error("watch events keep failing to decode: this kind is not followed, /healthz reports unhealthy until one decodes", {
        kind: this.kind,
        failures: this.decodeFailuresInRow,
      });
  }

  /** A watch event decoded: the watch works. */
  private decoded() {
    if (this.stale) this.log.info("watch events decode again", { kind: this.kind });
    this.decodeFailuresInRow = 0;
  }

  private async retryLater(what: string, err: unknown) {
    const base = Math.min(this.backoff.maxMs, this.backoff.initialMs * 2 ** this.failures);
    // Jitter spreads the reconnections of every node after an API server restart.
    const delay = Math.round(base * (0.5 + Math.random() / 2));
    this.failures++;
    const fields: Record<string, unknown> = { kind: this.kind, retryInMs: delay, attempt: this.failures };
    if (err) fields.error = errorMessage(err) || String(statusOf(err) ?? "error");
    this.log.warn(`${what}, keeping the last known state`, fields);
    await new Promise<void>((wake) => (this.sleeping = { timer: setTimeout(wake, delay), wake }));
    this.sleeping = undefined;
  }

  /**
   * GET the collection page by page. The next page is asked for as soon as
   * its continue token shows, at the head of the current page's body (a List
   * sends its metadata before its items), so the server builds it while this
   * one is still arriving, being decoded and handed over.
   */
  private async list() {
    const t0 = performance.now();
    const stats: ListStats = { items: 0, pages: 0, ms: 0, decodeMs: 0, encoding: "", via: "pages" };
    /** one chain of early requests; a chain whose token turned out wrong is cut */
    const chain = { dead: false };
    let first = true;
    const handOver = (items: Record<string, unknown>[]) => {
      if (!items.length) return;
      stats.items += items.length;
      this.sink.page(items, first);
      first = false;
    };
    const fetch = (cont: string | undefined): FetchedPage => {
      const feed = new Feed();
      const page: FetchedPage = {
        feed,
        done: this.listPage(cont, stats, feed, (token) => {
          if (chain.dead) return;
          page.next = { token, page: fetch(token) };
          // Awaited in its turn; a failure meanwhile must not go unhandled.
          page.next.page.done.catch(() => {});
        }),
      };
      return page;
    };
    let current = fetch(undefined);
    for (;;) {
      current.feed.attach(handOver);
      const { rv, cont } = await current.done;
      stats.pages++;
      if (cont) {
        const next = current.next;
        if (next && next.token === cont) current = next.page;
        else {
          if (next) chain.dead = true; // cannot happen with a well-formed List; never follow a wrong guess
          current = fetch(cont);
          current.done.catch(() => {});
        }
        continue;
      }
      // a list with no item at all still marks its start
      if (first) this.sink.page([], true);
      stats.ms = performance.now() - t0;
      this.sink.listed(stats);
      this.resourceVersion = rv;
      this.listFrom = "0";
      return;
    }
  }

  /**
   * One page, its items fed to `feed` as they decode; `early` gets the next
   * page's continue token as soon as the body's head shows it. The first
   * page asks for listFrom's resourceVersion; the next ones carry the
   * continue token alone (it holds the resourceVersion), as client-go's pager.
   */
  private async listPage(
    cont: string | undefined,
    stats: ListStats,
    feed: Feed,
    early: (token: string) => void,
  ): Promise<{ rv: string; cont: string | undefined }> {
    const signal = AbortSignal.any([this.stop.signal, AbortSignal.timeout(LIST_TIMEOUT_MS)]);
    const query = { ...this.selectors(), limit: String(PAGE), ...(cont ? { continue: cont } : { resourceVersion: this.listFrom }) };
    const res = await expectOK(await this.get(this.spec.path, query, signal), [200], protobufObject);
    const encoding = encodingOf(res.headers["content-type"]);
    if (!encoding) throw new Error(`${this.spec.path}: answered in ${res.headers["content-type"]}, which kpng does not read`);
    stats.encoding = encoding;
    return encoding === "protobuf" ? this.protobufPage(res, stats, feed, early) : this.jsonPage(res, stats, feed, early);
  }

  private async protobufPage(res: IncomingMessage, stats: ListStats, feed: Feed, early: (token: string) => void) {
    const decoder = new ListDecoder(this.kind, (meta) => meta.continue && early(meta.continue));
    for await (const chunk of res) {
      const t0 = performance.now();
      const items = decoder.push(chunk as Buffer);
      stats.decodeMs += performance.now() - t0;
      feed.push(items);
    }
    try {
      decoder.end();
    } catch (err) {
      throw new Error(`${this.spec.path}: ${errorMessage(err)}`);
    }
    return { rv: decoder.resourceVersion, cont: decoder.continue || undefined };
  }

  private async jsonPage(res: IncomingMessage, stats: ListStats, feed: Feed, early: (token: string) => void) {
    const chunks: Buffer[] = [];
    let head = "";
    let searching = true;
    for await (const chunk of res) {
      const c = chunk as Buffer;
      chunks.push(c);
      if (!searching) continue;
      head += c.toString("latin1", 0, Math.min(c.length, HEAD_BYTES));
      const token = continueToken(head);
      if (token !== undefined || head.length >= HEAD_BYTES) {
        searching = false;
        if (token) early(token);
      }
    }
    const text = Buffer.concat(chunks).toString("utf8");
    const t0 = performance.now();
    const body = safeJSON(text) as { items?: unknown; metadata?: { resourceVersion?: string; continue?: string } } | undefined;
    stats.decodeMs += performance.now() - t0;
    if (!body || !Array.isArray(body.items)) throw new Error(`${this.spec.path}: the answer is not a Kubernetes List`);
    feed.push(body.items.filter((it): it is Record<string, unknown> => typeof it === "object" && it !== null));
    return { rv: body.metadata?.resourceVersion ?? "", cont: body.metadata?.continue || undefined };
  }

  private selectors() {
    return { labelSelector: this.spec.labelSelector, fieldSelector: this.spec.fieldSelector };
  }

  /**
   * One watch request, read event by event until the server ends it, it
   * drops, or it errors. `listing`: the list itself, streamed (client-go's
   * watch-list): resourceVersion "" NotOlderThan with sendInitialEvents, the
   * ADDED events before the end BOOKMARK handed over as list items, then on
   * as a watch. A stream that ends before that BOOKMARK listed nothing whole:
   * it is tried again, as a failed list.
   */
  private async watchOnce(listing = false): Promise<Outcome> {
    const started = performance.now();
    // Like client-go: a random 5-10 minute server-side timeout spreads reconnections.
    const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
    const ctl = new AbortController();
    this.request = ctl;
    let events = 0;
    let gone = false;
    let open = false;
    const list: ListStats | null = listing ? { items: 0, pages: 0, ms: 0, decodeMs: 0, encoding: "", via: "watch" } : null;
    let initial = listing;
    // A silent half-open connection is cut a minute after the server should have ended it:
    // the timer starts over with every chunk that arrives (a refresh, not a new timer per
    // event: a streamed list is thousands of events).
    const idle = setTimeout(() => ctl.abort(new DOMException("watch idle", "TimeoutError")), (timeoutSeconds + 60) * 1000);
    try {
      const query = {
        ...this.selectors(),
        watch: "true",
        allowWatchBookmarks: "true",
        timeoutSeconds: String(timeoutSeconds),
        ...(listing
          ? { sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan", resourceVersion: "" }
          : { resourceVersion: this.resourceVersion }),
      };
      const res = await this.get(this.spec.path, query, AbortSignal.any([this.stop.signal, ctl.signal]));
      const code = res.statusCode ?? 0;
      // 4xx but 410 (and authorization, throttling): a server that does not take sendInitialEvents
      if (listing && code >= 400 && code < 500 && ![401, 403, 410, 429].includes(code))
        return { type: "refused", err: await expectOK(res, [200], protobufObject).catch((err: unknown) => err) };
      await expectOK(res, [200], protobufObject);
      res.socket?.setKeepAlive?.(true, 30_000);
      open = true;
      this.sink.watching(1);
      const encoding = encodingOf(res.headers["content-type"]);
      if (!encoding) throw new Error(`${this.spec.path}: watch answered in ${res.headers["content-type"]}, which kpng does not read`);
      if (list) list.encoding = encoding;
      // Read in flowing mode, each chunk's events handled in its 'data' event: the API server's
      // answers come in 2 KB chunks (Go's net/http chunking), 10,000s of them for a streamed list,
      // and an async iterator (a promise, the stream's buffer list and a generator step per chunk)
      // cost more than decoding the chunk itself.
      await readWatch(res, encoding, list, (batch) => {
        idle.refresh();
        for (const ev of batch) {
          if (ev.undecodable !== undefined || !ev.type || !ev.object || typeof ev.object !== "object") {
            const why = ev.undecodable ?? "a watch event without a type or an object";
            this.undecoded(why);
            if (initial) throw new Error(`${this.spec.path}: an event of the streamed list did not decode: ${why}`);
            continue;
          }
          if (ev.type === "ERROR") {
            const status = ev.object as { code?: unknown; message?: unknown };
            if (status.code === 410) gone = true;
            else this.log.warn("watch error event", { kind: this.kind, code: String(status.code), message: String(status.message ?? "") });
            continue;
          }
          events++;
          const meta = ev.object.metadata as { resourceVersion?: unknown; annotations?: Record<string, string> } | undefined;
          const rv = meta?.resourceVersion;
          if (initial) {
            if (ev.type === "ADDED") {
              if (UNDECODABLE in ev.object) this.undecoded(String(ev.object[UNDECODABLE]), true);
              this.sink.page([ev.object], list!.items++ === 0);
              continue;
            }
            if (ev.type === "BOOKMARK" && meta?.annotations?.[INITIAL_EVENTS_END] === "true") {
              initial = false;
              if (list!.items === 0) this.sink.page([], true);
              list!.ms = performance.now() - started;
              this.sink.listed(list!);
              if (typeof rv === "string") this.resourceVersion = rv;
              this.failures = 0;
              this.listedOnce.resolve();
              continue;
            }
          }
          if (ev.type !== "BOOKMARK") {
            // refused by name downstream (kube.ts); the watch goes on
            if (UNDECODABLE in ev.object) this.undecoded(String(ev.object[UNDECODABLE]), true);
            else this.decoded();
            this.sink.event(ev.type, ev.object);
          }
          if (!initial && typeof rv === "string" && rv) this.resourceVersion = rv;
        }
      });
      if (gone) return { type: "gone" };
      if (initial)
        return { type: "error", err: new Error(`${this.spec.path}: the stream ended before its initial events did`), timeout: false };
      // A stream that ends without an error is a normal end (timeoutSeconds) or a dropped
      // connection; either way we resume from the last resourceVersion.
      return { type: "closed", events, ms: performance.now() - started };
    } catch (err) {
      if (gone || statusOf(err) === 410) return { type: "gone" };
      // What escapes the decoder is its framing (a frame's own bytes come back marked undecodable).
      if (err instanceof ProtoError) {
        this.undecoded(errorMessage(err));
        return { type: "corrupt", err };
      }
      const timeout =
        (err as { name?: string })?.name === "TimeoutError" ||
        (ctl.signal.reason as { name?: string } | undefined)?.name === "TimeoutError";
      // A connection cut mid-stream ("aborted", ECONNRESET) after events is a drop, not a failure.
      if (open && events > 0 && !timeout && !initial) return { type: "closed", events, ms: performance.now() - started };
      return { type: "error", err, timeout };
    } finally {
      clearTimeout(idle);
      if (open) this.sink.watching(-1);
      this.request = undefined;
    }
  }
}

/** how much of a page's head is searched for its continue token */
const HEAD_BYTES = 4096;

/**
 * A page's items in order: kept while an earlier page is still being handed
 * over, passed straight on once this page's turn has come.
 */
class Feed {
  private held: Record<string, unknown>[][] = [];
  private to?: (items: Record<string, unknown>[]) => void;
  push(items: Record<string, unknown>[]) {
    if (this.to) this.to(items);
    else if (items.length) this.held.push(items);
  }
  attach(to: (items: Record<string, unknown>[]) => void) {
    for (const items of this.held) to(items);
    this.held = [];
    this.to = to;
  }
}

/** a page under way, and the next one if it was asked for early (with the token used) */
interface FetchedPage {
  feed: Feed;
  done: Promise<{ rv: string; cont: string | undefined }>;
  next?: { token: string; page: FetchedPage };
}

/** what a chunk of a watch answer completes: protobuf frames or JSON lines; `end` the rest once the answer ends */
interface EventReader {
  push(chunk: Buffer): Array<Partial<WatchEvent>>;
  end(): Array<Partial<WatchEvent>>;
}

function eventReader(encoding: "json" | "protobuf"): EventReader {
  if (encoding === "protobuf") {
    const decoder = new WatchDecoder();
    return { push: (chunk) => decoder.push(chunk), end: () => [] };
  }
  let rest = "";
  const text = new StringDecoder("utf8");
  return {
    push(chunk) {
      const lines = (rest + text.write(chunk)).split("\n");
      rest = lines.pop()!;
      return lines.filter((l) => l.trim()).map(jsonEvent);
    },
    end: () => (rest.trim() ? [jsonEvent(rest)] : []),
  };
}

/**
 * The events of a watch answer, handed to `each` as each chunk completes
 * them, in the chunk's own 'data' event; decoding time added to `stats`
 * while it is a list. Resolves when the answer ends; rejects when it fails,
 * is cut before its end, or `each` throws (the answer is then dropped).
 */
function readWatch(
  res: IncomingMessage,
  encoding: "json" | "protobuf",
  stats: ListStats | null,
  each: (batch: Array<Partial<WatchEvent>>) => void,
): Promise<void> {
  const reader = eventReader(encoding);
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      res.destroy();
      reject(err);
    };
    const take = (read: () => Array<Partial<WatchEvent>>) => {
      const t0 = stats ? performance.now() : 0;
      const batch = read();
      if (stats) stats.decodeMs += performance.now() - t0;
      if (batch.length) each(batch);
    };
    res.on("data", (chunk: Buffer) => {
      if (settled) return;
      try {
        take(() => reader.push(chunk));
      } catch (err) {
        fail(err);
      }
    });
    res.on("end", () => {
      if (settled) return;
      try {
        take(() => reader.end());
        settled = true;
        resolve();
      } catch (err) {
        fail(err);
      }
    });
    res.on("error", fail);
    // closed before its end, with no error of its own (the connection cut): as an async iterator says it
    res.on("close", () => fail(Object.assign(new Error("aborted"), { code: "ECONNRESET" })));
  });
}

/** One line of a JSON watch: its event, or one marked undecodable (the next line is read as usual: lines are the framing). */
function jsonEvent(line: string): Partial<WatchEvent> {
  const ev = safeJSON(line);
  if (ev && typeof ev === "object" && !Array.isArray(ev)) return ev as Partial<WatchEvent>;
  return { undecodable: `not a JSON watch event: ${JSON.stringify(line.length > 80 ? `${line.slice(0, 80)}...` : line)}` };
}

/**
 * The continue token in the head of a List's body, before its items: a
 * string (set, "" on the last page), null when the metadata is complete
 * without one, undefined when the head does not say yet. Tokens are
 * base64; one with an escape is left to the full decode.
 */
export function continueToken(head: string): string | null | undefined {
  const items = head.indexOf('"items":');
  const meta = /"metadata":\{([^{}]*)\}/.exec(items < 0 ? head : head.slice(0, items));
  if (!meta) return items < 0 ? undefined : null;
  const m = /"continue":"([^"\\]*)"/.exec(meta[1]);
  return m ? m[1] : /"continue":/.test(meta[1]) ? undefined : null;
}

function safeJSON(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
