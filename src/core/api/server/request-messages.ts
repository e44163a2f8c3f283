// gRPC length-prefixed messages from a request body, read by 'data' events.
// Why not `for await (const chunk of req)`: a Readable's async iterator runs
// several rounds of stream machinery per chunk, and every change set a
// watch stream sends is answered by one small request message; with
// thousands of streams that machinery cost more than the rest of the round.
// Backpressure is kept: past a few queued messages the request is paused,
// so HTTP/2 flow control stops a client that sends faster than it is served.

import { Code, ConnectError } from "@connectrpc/connect";

/** What is used of Node's http and http2 compatibility requests. */
export interface RequestBody {
  on(event: "data", fn: (chunk: Buffer) => void): unknown;
  on(event: "end" | "close", fn: () => void): unknown;
  on(event: "error", fn: (err: Error) => void): unknown;
  off(event: "data", fn: (chunk: Buffer) => void): unknown;
  pause(): unknown;
  resume(): unknown;
}

/** queued messages past which the request is paused */
const QUEUE = 4;

export function requestMessages(req: RequestBody, maxMessage: number): AsyncIterableIterator<Uint8Array> {
  const queue: Uint8Array[] = [];
  let buf: Buffer = Buffer.alloc(0);
  let failed: unknown = null;
  let ended = false;
  let paused = false;
  let waiter: (() => void) | null = null;
  const notify = () => {
    const w = waiter;
    waiter = null;
    w?.();
  };
  const fail = (err: unknown) => {
    failed ??= err;
    req.off("data", onData);
    notify();
  };
  const onData = (chunk: Buffer) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    while (buf.length >= 5) {
      const len = buf.readUInt32BE(1);
      if (len > maxMessage) return fail(new ConnectError(`request message of ${len} bytes exceeds ${maxMessage}`, Code.ResourceExhausted));
      if (buf.length < 5 + len) break;
      if (buf[0] & 1) return fail(new ConnectError("compressed request messages are not supported", Code.Unimplemented));
      queue.push(buf.subarray(5, 5 + len));
      buf = buf.subarray(5 + len);
    }
    if (queue.length >= QUEUE && !paused) {
      paused = true;
      req.pause();
    }
    notify();
  };
  const onEnd = () => {
    if (buf.length) fail(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
    ended = true;
    notify();
  };
  req.on("data", onData);
  req.on("end", onEnd);
  req.on("close", onEnd);
  req.on("error", fail);
  const done = { done: true as const, value: undefined };
  return {
    async next(): Promise<IteratorResult<Uint8Array>> {
      for (;;) {
        if (failed) throw failed;
        const m = queue.shift();
        if (m) {
          if (paused && queue.length < QUEUE) {
            paused = false;
            req.resume();
          }
          return { done: false, value: m };
        }
        if (ended) return done;
        await new Promise<void>((resolve) => (waiter = resolve));
      }
    },
    async return(): Promise<IteratorResult<Uint8Array>> {
      req.off("data", onData);
      queue.length = 0;
      ended = true;
      return done;
    },
    [Symbol.asyncIterator]() {
      return this;
    },
  };
}
