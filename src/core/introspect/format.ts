// `kpng get` and `kpng verify` as an operator reads them: kubectl-like
// columns (-o wide adds some, and what each backend holds), or the whole
// reply as JSON or YAML. Pure: a reply in, text out.

import { toJson } from "@bufbuild/protobuf";
import { stringify } from "yaml";
import {
  ServicesReplySchema,
  VerifyReplySchema,
  type EndpointView,
  type PortView,
  type ScopeUse,
  type ServicesReply,
  type ServiceView,
  type VerifyReply,
} from "../../gen/introspectv1/introspect_pb.ts";

export type Output = "table" | "wide" | "json" | "yaml";
export type Kind = "services" | "endpoints";

/** kubectl's table: columns padded to their widest cell, three spaces apart */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? "").length)));
  return (
    all
      .map((r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i] + 3)))
          .join("")
          .trimEnd(),
      )
      .join("\n") + "\n"
  );
}

const list = (xs: readonly string[]) => (xs.length ? xs.join(",") : "<none>");
const hostPort = (ip: string, port: number) => (ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`);

/** an endpoint as a port reaches it: ip:targetPort, marked when it is a terminating fallback */
function target(ep: EndpointView, port: PortView): string | undefined {
  const t = ep.ports[port.name];
  if (t === undefined) return undefined;
  return hostPort(ep.ip, t) + (ep.terminating ? "(terminating)" : "");
}

function used(svc: ServiceView, port: PortView, scope: "internal" | "external"): string {
  if (scope === "external" && !svc.external) return "-";
  return list(svc.endpoints.flatMap((ep) => (ep[scope]?.used ? (target(ep, port) ?? []) : [])));
}

/** the endpoints neither scope uses, with the internal scope's reason (else the external one's) */
function leftOut(svc: ServiceView): string {
  const out = svc.endpoints.filter((ep) => !ep.internal?.used && !(svc.external && ep.external?.used));
  return out.length ? out.map((ep) => `${ep.ip}(${ep.internal?.reason || ep.external?.reason})`).join(",") : "<none>";
}

function frontends(port: PortView): string {
  const parts: string[] = [];
  const nodePorts = port.frontends.filter((f) => f.kind === "nodePort");
  for (const f of port.frontends) if (f.kind !== "nodePort") parts.push(hostPort(f.ip, f.port));
  if (port.nodePort) parts.push(`nodePort:${port.nodePort}${nodePorts.length ? `@${nodePorts.map((f) => f.ip).join("+")}` : ""}`);
  return list(parts);
}

function servicesTable(reply: ServicesReply, wide: boolean): string {
  const head = ["NAMESPACE", "NAME", "TYPE", "PORT", "FRONTENDS", "INTERNAL-ENDPOINTS", "EXTERNAL-ENDPOINTS", "LEFT-OUT"];
  const extra = ["POLICY(INT/EXT)", "AFFINITY", "SOURCE-RANGES", "HEALTH-CHECK"];
  const rows = reply.services.flatMap((s) =>
    s.ports.map((p) => {
      const row = [
        s.namespace,
        s.name,
        s.type,
        `${p.name ? `${p.name}:` : ""}${p.port}/${p.protocol}`,
        frontends(p),
        used(s, p, "internal"),
        used(s, p, "external"),
        leftOut(s),
      ];
      if (wide)
        row.push(
          `${s.internalTrafficPolicy}/${s.externalTrafficPolicy}`,
          s.affinityTimeoutSeconds ? `ClientIP:${s.affinityTimeoutSeconds}s` : "None",
          list(s.sourceRanges),
          s.healthCheckNodePort ? String(s.healthCheckNodePort) : "-",
        );
      return row;
    }),
  );
  return table(wide ? [...head, ...extra] : head, rows);
}

const scopeCell = (u: ScopeUse | undefined) => (u?.used ? "used" : (u?.reason ?? "-"));

function endpointsTable(reply: ServicesReply, wide: boolean): string {
  const head = ["NAMESPACE", "SERVICE", "ENDPOINT", "NODE", "READY", "SERVING", "TERMINATING", "INTERNAL", "EXTERNAL"];
  const extra = ["ZONE", "KEY", "PORTS", "WHY"];
  const rows = reply.services.flatMap((s) =>
    s.endpoints.map((ep) => {
      const row = [
        s.namespace,
        s.name,
        ep.ip,
        ep.nodeName || "<none>",
        String(ep.ready),
        String(ep.serving),
        String(ep.terminating),
        scopeCell(ep.internal),
        s.external ? scopeCell(ep.external) : "-",
      ];
      if (wide) {
        const scopes = s.external ? [ep.internal, ep.external] : [ep.internal];
        const why = scopes.filter((u) => u && !u.used && u.message).map((u) => u!.message);
        row.push(
          ep.zone || "<none>",
          ep.key,
          list(Object.entries(ep.ports).map(([n, p]) => `${n || "-"}:${p}`)),
          [...new Set(why)].join("; ") || "-",
        );
      }
      return row;
    }),
  );
  return table(wide ? [...head, ...extra] : head, rows);
}

/** what each backend of the process holds, for -o wide */
function backendsTable(reply: ServicesReply): string {
  const rows = reply.backends.map((b) => [
    b.name,
    b.revision ? String(b.revision) : "<none>",
    b.appliedUnixMs ? new Date(Number(b.appliedUnixMs)).toISOString() : "<never>",
    b.revision ? `${Math.round(b.syncSeconds * 1000)}ms` : "-",
    b.error || "-",
  ]);
  return table(["BACKEND", "REVISION", "APPLIED", "SYNC", "LAST-ERROR"], rows);
}

export function formatServices(reply: ServicesReply, kind: Kind, output: Output): string {
  if (output === "json") return JSON.stringify(toJson(ServicesReplySchema, reply, { alwaysEmitImplicit: true }), null, 2) + "\n";
  if (output === "yaml") return stringify(toJson(ServicesReplySchema, reply, { alwaysEmitImplicit: true }));
  const wide = output === "wide";
  const body = kind === "services" ? servicesTable(reply, wide) : endpointsTable(reply, wide);
  if (!wide) return body;
  return `${body}\nNODE ${reply.nodeName}   REVISION ${reply.revision}\n${reply.backends.length ? backendsTable(reply) : "no backend runs in this kpng (kpng serve)\n"}`;
}

export function formatVerify(reply: VerifyReply, output: Output): string {
  if (output === "json") return JSON.stringify(toJson(VerifyReplySchema, reply, { alwaysEmitImplicit: true }), null, 2) + "\n";
  if (output === "yaml") return stringify(toJson(VerifyReplySchema, reply, { alwaysEmitImplicit: true }));
  const rows = reply.backends.flatMap((b) => {
    if (b.error) return [[b.name, "-", "-", "error", b.error]];
    if (!b.supported) return [[b.name, "-", "-", "not-supported", "this backend cannot read the kernel back"]];
    if (!b.drifts.length) return [[b.name, "-", "-", "clean", "the kernel holds what was programmed"]];
    return b.drifts.map((d) => [b.name, d.service || "<base rules>", d.frontend || "-", d.kind, d.detail]);
  });
  return table(["BACKEND", "SERVICE", "FRONTEND", "DRIFT", "DETAIL"], rows);
}

/**
 * `kpng verify`'s verdict: clean only when every running backend read the
 * kernel back and found it as programmed; a backend that cannot verify is
 * not clean (nothing was checked), but no drift either.
 */
export function verifyStatus(reply: VerifyReply): "clean" | "drift" | "unsupported" {
  if (reply.backends.some((b) => b.error || b.drifts.length)) return "drift";
  return reply.backends.length && reply.backends.every((b) => b.supported) ? "clean" : "unsupported";
}
