// A response whose client stopped reading: a write the transport could not
// take (write() returned false) and no drain within the limit. Connect's
// handler waits for each drain, so what such a client holds is bounded (one
// message and the state of its stream); this bounds how long it holds it,
// as grpc-fast.ts does for the gRPC path: the stream is dropped and the
// client resyncs when it reconnects.

/** What is used of the http and http2 compatibility responses. */
export interface WatchedResponse {
  write(...args: never[]): boolean;
  once(event: "drain" | "close", fn: () => void): unknown;
  off(event: "drain" | "close", fn: () => void): unknown;
  /** HTTP/2: the stream, reset to drop it */
  readonly stream?: { close(code?: number): void };
  destroy(): void;
}

/** RST_STREAM CANCEL */
const CANCEL = 8;

/** Drops the response (HTTP/2: its stream; HTTP/1.1: its connection) when a write waits for a drain longer than `ms`. */
export function dropWhenStuck(res: WatchedResponse, ms: number, onStuck: () => void): void {
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const drained = () => {
    clearTimeout(timer);
    timer = undefined;
  };
  (res as unknown as { write: (...args: unknown[]) => boolean }).write = (...args) => {
    const ok = write(...args);
    if (!ok && !timer) {
      timer = setTimeout(() => {
        res.off("drain", drained);
        onStuck();
        if (res.stream) res.stream.close(CANCEL);
        else res.destroy();
      }, ms);
      res.once("drain", drained);
    }
    return ok;
  };
  res.once("close", drained);
}
