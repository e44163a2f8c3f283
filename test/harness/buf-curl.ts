// `buf curl` of one gRPC call against kpng's API, as a user checks a brain
// by hand: the generated schema from proto/, gRPC over h2c for an http://
// URL (kpng serves no HTTP/1 gRPC) or over TLS for an https:// one.

import { join } from "node:path";
import { BUF, ROOT } from "./kpng-process.ts";

export interface BufCurlResult {
  code: number;
  out: string;
  err: string;
  /** the response messages as buf prints them (JSON), in order */
  messages: any[];
}

/** `args`: more flags, e.g. `["--unix-socket", sock]` or a client certificate; `body`: the request(s) as JSON */
export async function bufCurl(url: string, body: string, args: string[] = [], opts: { timeoutMs?: number } = {}): Promise<BufCurlResult> {
  const h2c = url.startsWith("http://") ? ["--http2-prior-knowledge"] : [];
  const p = Bun.spawn([BUF, "curl", "--protocol", "grpc", ...h2c, "--schema", join(ROOT, "proto"), ...args, "-d", body, url], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
    ...(opts.timeoutMs && { timeout: opts.timeoutMs }),
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  // buf prints one pretty JSON object per message, back to back
  const messages = out.trim() ? (JSON.parse(`[${out.trim().replace(/\n}\n{/g, "},{")}]`) as any[]) : [];
  return { code, out, err, messages };
}
