// A protobuf encoder for the in-repo API server, written apart from kpng's
// decoder (src/core/sources/protobuf/) so that a misread field number shows
// as a test failure rather than agreeing with itself. It writes as the real
// API server's Go (gogo) marshallers do: every non-pointer field, zero or
// not (so the decoder's reading of omitempty is exercised), pointer fields
// only when set, fields in field-number order. Field numbers: Kubernetes'
// generated.proto (core/v1, discovery/v1, meta/v1, runtime, util/intstr).

type Obj = Record<string, any>;

export class Writer {
  bytes: number[] = [];
  varint(n: number) {
    // int32 negatives are sign-extended to 64 bits: 10 bytes
    if (n < 0) n += 2 ** 64;
    while (n >= 0x80) {
      this.bytes.push((n % 128) | 0x80);
      n = Math.floor(n / 128);
    }
    this.bytes.push(n);
  }
  tag(field: number, wt: number) {
    this.varint(field * 8 + wt);
  }
  int(field: number, n: number) {
    this.tag(field, 0);
    this.varint(n);
  }
  bool(field: number, b: boolean) {
    this.int(field, b ? 1 : 0);
  }
  raw(field: number, data: Uint8Array | number[]) {
    this.tag(field, 2);
    this.varint(data.length);
    for (const b of data) this.bytes.push(b);
  }
  str(field: number, s: string) {
    this.raw(field, new TextEncoder().encode(s));
  }
  msg(field: number, fill: (w: Writer) => void) {
    const w = new Writer();
    fill(w);
    this.raw(field, w.bytes);
  }
  /** a pointer field: written when set */
  optStr(field: number, s: unknown) {
    if (typeof s === "string") this.str(field, s);
  }
  optInt(field: number, n: unknown) {
    if (typeof n === "number") this.int(field, n);
  }
  optBool(field: number, b: unknown) {
    if (typeof b === "boolean") this.bool(field, b);
  }
  strs(field: number, list: unknown) {
    for (const s of (list as string[] | undefined) ?? []) this.str(field, s);
  }
  map(field: number, m: Record<string, string> | undefined) {
    for (const k of Object.keys(m ?? {}).sort()) this.msg(field, (e) => (e.str(1, k), e.str(2, m![k])));
  }
}

const seconds = (iso: string) => Math.floor(Date.parse(iso) / 1000);

function objectMeta(w: Writer, m: Obj = {}) {
  w.str(1, m.name ?? "");
  w.str(2, m.generateName ?? "");
  w.str(3, m.namespace ?? "");
  w.str(4, "");
  w.str(5, m.uid ?? "");
  w.str(6, m.resourceVersion ?? "");
  w.int(7, m.generation ?? 0);
  w.msg(8, (t) => (t.int(1, m.creationTimestamp ? seconds(m.creationTimestamp) : 0), t.int(2, 0)));
  if (m.deletionTimestamp) w.msg(9, (t) => (t.int(1, seconds(m.deletionTimestamp)), t.int(2, 0)));
  w.map(11, m.labels);
  w.map(12, m.annotations);
  for (const f of m.finalizers ?? []) w.str(14, f);
  // ManagedFieldsEntry: manager 1, operation 2, apiVersion 3, fieldsType 6, fieldsV1 7 { Raw 1 }
  for (const e of m.managedFields ?? [])
    w.msg(17, (x) => {
      x.str(1, e.manager ?? "");
      x.str(2, e.operation ?? "");
      x.str(3, e.apiVersion ?? "");
      x.str(6, e.fieldsType ?? "FieldsV1");
      x.msg(7, (f) => f.str(1, JSON.stringify(e.fieldsV1 ?? {})));
    });
}

function service(w: Writer, o: Obj) {
  const spec = o.spec ?? {};
  w.msg(1, (m) => objectMeta(m, o.metadata));
  w.msg(2, (s) => {
    for (const p of spec.ports ?? [])
      s.msg(1, (x) => {
        x.str(1, p.name ?? "");
        x.str(2, p.protocol ?? "");
        x.int(3, p.port ?? 0);
        x.msg(4, (t) =>
          typeof p.targetPort === "string"
            ? (t.int(1, 1), t.int(2, 0), t.str(3, p.targetPort))
            : (t.int(1, 0), t.int(2, p.targetPort ?? 0), t.str(3, "")),
        );
        x.int(5, p.nodePort ?? 0);
        x.optStr(6, p.appProtocol);
      });
    s.map(2, spec.selector);
    s.str(3, spec.clusterIP ?? "");
    s.str(4, spec.type ?? "");
    s.strs(5, spec.externalIPs);
    s.str(7, spec.sessionAffinity ?? "");
    s.str(8, spec.loadBalancerIP ?? "");
    s.strs(9, spec.loadBalancerSourceRanges);
    s.str(10, spec.externalName ?? "");
    s.str(11, spec.externalTrafficPolicy ?? "");
    s.int(12, spec.healthCheckNodePort ?? 0);
    s.bool(13, !!spec.publishNotReadyAddresses);
    if (spec.sessionAffinityConfig)
      s.msg(
        14,
        (c) => spec.sessionAffinityConfig.clientIP && c.msg(1, (x) => x.optInt(1, spec.sessionAffinityConfig.clientIP.timeoutSeconds)),
      );
    s.optStr(17, spec.ipFamilyPolicy);
    s.strs(18, spec.clusterIPs);
    s.strs(19, spec.ipFamilies);
    s.optStr(22, spec.internalTrafficPolicy);
  });
  w.msg(3, (st) =>
    st.msg(1, (lb) => {
      for (const i of o.status?.loadBalancer?.ingress ?? [])
        lb.msg(1, (x) => (x.str(1, i.ip ?? ""), x.str(2, i.hostname ?? ""), x.optStr(3, i.ipMode)));
    }),
  );
}

function endpointSlice(w: Writer, o: Obj) {
  w.msg(1, (m) => objectMeta(m, o.metadata));
  for (const e of o.endpoints ?? [])
    w.msg(2, (x) => {
      x.strs(1, e.addresses);
      x.msg(2, (c) => (c.optBool(1, e.conditions?.ready), c.optBool(2, e.conditions?.serving), c.optBool(3, e.conditions?.terminating)));
      x.optStr(3, e.hostname);
      if (e.targetRef)
        x.msg(
          4,
          (r) => (
            r.str(1, e.targetRef.kind ?? ""),
            r.str(2, e.targetRef.namespace ?? ""),
            r.str(3, e.targetRef.name ?? ""),
            r.str(4, e.targetRef.uid ?? "")
          ),
        );
      x.optStr(6, e.nodeName);
      x.optStr(7, e.zone);
      if (e.hints)
        x.msg(8, (h) => {
          for (const z of e.hints.forZones ?? []) h.msg(1, (f) => f.str(1, z.name));
          for (const n of e.hints.forNodes ?? []) h.msg(2, (f) => f.str(1, n.name));
        });
    });
  for (const p of o.ports ?? [])
    w.msg(
      3,
      (x) => (
        x.optStr(1, p.name ?? undefined), x.optStr(2, p.protocol ?? undefined), x.optInt(3, p.port ?? undefined), x.optStr(4, p.appProtocol)
      ),
    );
  w.str(4, o.addressType ?? "");
}

function node(w: Writer, o: Obj) {
  w.msg(1, (m) => objectMeta(m, o.metadata));
  w.msg(2, (s) => {
    s.str(1, o.spec?.podCIDR ?? "");
    s.str(2, "");
    s.str(3, o.spec?.providerID ?? "");
    s.bool(4, !!o.spec?.unschedulable);
    for (const t of o.spec?.taints ?? []) s.msg(5, (x) => (x.str(1, t.key ?? ""), x.str(2, t.value ?? ""), x.str(3, t.effect ?? "")));
    for (const c of o.spec?.podCIDRs ?? []) s.str(7, c);
  });
  w.msg(3, (s) => {
    s.str(3, "");
    for (const a of o.status?.addresses ?? []) s.msg(5, (x) => (x.str(1, a.type ?? ""), x.str(2, a.address ?? "")));
  });
}

function status(w: Writer, o: Obj) {
  // ListMeta { selfLink 1, resourceVersion 2, continue 3 }: strings, written empty too (a 410 to a list carries a continue token)
  w.msg(1, (m) => (m.str(1, ""), m.str(2, o.metadata?.resourceVersion ?? ""), m.str(3, o.metadata?.continue ?? "")));
  w.str(2, o.status ?? "Failure");
  w.str(3, o.message ?? "");
  w.str(4, o.reason ?? "");
  w.int(6, o.code ?? 0);
}

const encoders: Record<string, (w: Writer, o: Obj) => void> = {
  Service: service,
  EndpointSlice: endpointSlice,
  Node: node,
  Status: status,
};
const apiVersions: Record<string, string> = {
  Service: "v1",
  EndpointSlice: "discovery.k8s.io/v1",
  Node: "v1",
  Status: "v1",
  WatchEvent: "meta.k8s.io/v1",
};

/** a length-delimited field's head: key and length */
function head(field: number, length: number): Uint8Array {
  const w = new Writer();
  w.tag(field, 2);
  w.varint(length);
  return Uint8Array.from(w.bytes);
}

/** "k8s\0" + runtime.Unknown { typeMeta { apiVersion 1, kind 2 }, raw 2, contentEncoding 3, contentType 4 } */
function body(kind: string, raw: Uint8Array[]): Uint8Array {
  const typeMeta = new Writer();
  // a List's apiVersion is its items' (EndpointSliceList: discovery.k8s.io/v1)
  typeMeta.msg(1, (t) => (t.str(1, apiVersions[kind] ?? apiVersions[kind.replace(/List$/, "")] ?? "v1"), t.str(2, kind)));
  const tail = new Writer();
  tail.str(3, "");
  tail.str(4, "");
  const length = raw.reduce((n, r) => n + r.length, 0);
  return Buffer.concat([
    Uint8Array.of(0x6b, 0x38, 0x73, 0x00),
    Uint8Array.from(typeMeta.bytes),
    head(2, length),
    ...raw,
    Uint8Array.from(tail.bytes),
  ]);
}

/** One object's message bytes (no envelope): what a List holds as an item, and what the server keeps per object. */
export function encodeItem(kind: string, o: Obj): Uint8Array {
  const w = new Writer();
  encoders[kind](w, o);
  return Uint8Array.from(w.bytes);
}

/** One object (`kind` says which) as a protobuf body. */
export function encodeObject(kind: string, o: Obj, item = encodeItem(kind, o)): Uint8Array {
  return body(kind, [item]);
}

/** A List of `kind` from its items' bytes: ListMeta { selfLink 1, resourceVersion 2, continue 3, remainingItemCount 4 (when set) } then each item as field 2. */
export function encodeList(
  kind: string,
  items: Uint8Array[],
  meta: { resourceVersion: string; continue?: string; remainingItemCount?: number },
): Uint8Array {
  const m = new Writer();
  m.msg(1, (x) => (x.str(1, ""), x.str(2, meta.resourceVersion), x.str(3, meta.continue ?? ""), x.optInt(4, meta.remainingItemCount)));
  const parts: Uint8Array[] = [Uint8Array.from(m.bytes)];
  for (const it of items) parts.push(head(2, it.length), it);
  return body(`${kind}List`, parts);
}

/** One watch frame: a 4-byte big-endian length, then a bare WatchEvent { type 1, object 2: RawExtension { raw 1 } } (no envelope), whose raw is a body. */
export function encodeWatchEvent(type: string, kind: string, o: Obj, item?: Uint8Array): Uint8Array {
  const object = encodeObject(kind, o, item);
  const t = new Writer();
  t.str(1, type);
  const ext = Buffer.concat([head(1, object.length), object]);
  // a bare WatchEvent, as the API server frames one (test/sources/kube/wire-real.test.ts holds this to its bytes)
  const frame = Buffer.concat([Uint8Array.from(t.bytes), head(2, ext.length), ext]);
  const out = new Uint8Array(4 + frame.length);
  new DataView(out.buffer).setUint32(0, frame.length);
  out.set(frame, 4);
  return out;
}
