// Lines of a child's output stream as they arrive, each with the time the
// bench read it, and a way to wait for one matching a pattern: how the
// benches read kpng's log and the in-repo API server's answers.

export interface Line {
  line: string;
  /** Date.now() when the bench read it */
  at: number;
}

export function lines(stream: ReadableStream<Uint8Array>) {
  const all: Line[] = [];
  let wake = () => {};
  void (async () => {
    const dec = new TextDecoder();
    let rest = "";
    for await (const chunk of stream) {
      const parts = (rest + dec.decode(chunk, { stream: true })).split("\n");
      rest = parts.pop()!;
      const at = Date.now();
      for (const line of parts) all.push({ line, at });
      wake();
    }
  })();
  const count = (re: RegExp) => all.filter((l) => re.test(l.line)).length;
  /** the `n`th line matching `re`; throws after `timeoutMs` with the last lines read */
  const wait = async (re: RegExp, n = 1, timeoutMs = 60_000): Promise<Line> => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const hits = all.filter((l) => re.test(l.line));
      if (hits.length >= n) return hits[n - 1];
      if (Date.now() > end)
        throw new Error(
          `timed out waiting for ${re}:\n${all
            .slice(-5)
            .map((l) => l.line)
            .join("\n")}`,
        );
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 200);
      });
    }
  };
  return { all, count, wait };
}
