// The two ends of the userspace bench (bench/userspace.bench.ts), each run in
// a network namespace of its own:
//
//   bun userspace-peer.ts serve PORT
//       a pod's server: greets every connection with one byte, counts and
//       discards what it receives, and answers "done" after the client's FIN.
//       Prints "ready".
//   bun userspace-peer.ts latency IP PORT CONCURRENCY COUNT
//       COUNT connections, CONCURRENCY at a time: the time from connect() to
//       the greeting, per connection. Prints {"ms": [...]}.
//   bun userspace-peer.ts throughput IP PORT STREAMS SECONDS
//       STREAMS connections sending 64 KiB writes for SECONDS, then FIN; the
//       figure counts the bytes the server confirmed. Prints {"bytes", "seconds"}.

import net from "node:net";

const [mode, ...args] = process.argv.slice(2);

if (mode === "serve") {
  const server = net.createServer({ allowHalfOpen: true, noDelay: true }, (c) => {
    c.on("error", () => {});
    c.write("g");
    let n = 0;
    c.on("data", (d) => (n += d.length));
    c.on("end", () => c.end(`done ${n}\n`));
  });
  server.listen({ port: Number(args[0]), host: "::", ipv6Only: false }, () => console.log("ready"));
} else if (mode === "latency") {
  const [ip, port, conc, count] = [args[0]!, Number(args[1]), Number(args[2]), Number(args[3])];
  const ms: number[] = [];
  let left = count;
  const one = () =>
    new Promise<void>((resolve) => {
      const t0 = performance.now();
      const s = net.connect({ host: ip, port, noDelay: true });
      s.once("data", () => {
        ms.push(performance.now() - t0);
        s.destroy();
        resolve();
      });
      s.on("error", () => resolve());
    });
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (left-- > 0) await one();
    }),
  );
  console.log(JSON.stringify({ ms }));
} else if (mode === "throughput") {
  const [ip, port, streams, seconds] = [args[0]!, Number(args[1]), Number(args[2]), Number(args[3])];
  const chunk = Buffer.alloc(64 * 1024, 120);
  const t0 = performance.now();
  const until = t0 + seconds * 1000;
  const one = () =>
    new Promise<number>((resolve) => {
      const s = net.connect({ host: ip, port, allowHalfOpen: true });
      let answer = "";
      s.on("data", (d) => (answer += d.toString()));
      s.on("error", () => resolve(0));
      s.on("close", () => resolve(Number(/done (\d+)/.exec(answer)?.[1] ?? 0)));
      const pump = () => {
        while (performance.now() < until) if (!s.write(chunk)) return void s.once("drain", pump);
        s.end();
      };
      s.once("connect", pump);
    });
  const bytes = (await Promise.all(Array.from({ length: streams }, one))).reduce((a, b) => a + b, 0);
  console.log(JSON.stringify({ bytes, seconds: (performance.now() - t0) / 1000 }));
}
