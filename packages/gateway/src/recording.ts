// A sandbox's recording: the bytes of its inputs (command specs, stdin, file contents, egress bodies, sync entropy) in the tenant's chunk store, named by content id from its events.
import { createHash } from 'node:crypto';
import { Transform } from 'node:stream';
import { SandglassError, type Logger } from '@sandglass/core';
import type { CaptureLease, ChunkStore, TenantStore } from '@sandglass/chunkstore';
import type { RecordedAnswer, ReplaySource } from '@sandglass/egress';

export const DEFAULT_RECORDING_CAP_BYTES = 256 * 1024 * 1024;
/**
 * Content longer than this is stored as parts of this size plus one index chunk (their ids, one per line) that the
 * content id names; shorter content is one chunk. A reader tells the two apart by the size the event gives.
 */
export const CONTENT_PART_BYTES = 4 * 1024 * 1024;
/** While input keeps arriving faster than it is stored, the manifest is still committed this often. */
const COMMIT_AT_LEAST_EVERY_MS = 2_000;

/** The manifest that keeps a sandbox's recorded chunks alive in GC's mark, like a snapshot's manifest does its own. */
export function recordingManifestId(sandboxId: string): string {
  return `rec_${sandboxId}`;
}

/** Content as an event names it: `contentId` null when it was not recorded (the cap was reached). */
export interface ContentRef {
  contentId: string | null;
  sizeBytes: number;
}

export interface RecordingBody {
  kind: 'recording';
  sandboxId: string;
  /** Input bytes recorded (before compression), what the cap counts. */
  recordedBytes: number;
  capped: boolean;
}

export interface RecorderOptions {
  store: ChunkStore;
  tenantId: string;
  sandboxId: string;
  capBytes: number;
  logger: Logger;
  /** Called once, when the cap is first reached; the caller records `recording.capped`. */
  onCapped: (data: { capBytes: number; recordedBytes: number }) => void;
}

/**
 * Records input bytes without adding a wait to the input: the content id is computed at once (keyed BLAKE3, in this
 * process), the write to the store runs behind it, in order, and the recording's manifest is committed once the
 * writes have caught up (at least every 2 s while they have not). A chunk is leased from before its write until a manifest naming it is committed, so GC never takes it.
 */
export class Recorder {
  readonly #tenant: TenantStore;
  readonly #opts: RecorderOptions;
  readonly #refs: Set<string>;
  #recordedBytes: number;
  #capped: boolean;
  #queue: Array<{ id: string; data: Buffer }> = [];
  #lease: CaptureLease;
  #draining?: Promise<void>;
  #committedAt = performance.now();
  #closed = false;

  private constructor(tenant: TenantStore, opts: RecorderOptions, prior: { refs: string[]; body?: RecordingBody }) {
    this.#tenant = tenant;
    this.#opts = opts;
    this.#refs = new Set(prior.refs);
    this.#recordedBytes = prior.body?.recordedBytes ?? 0;
    this.#capped = prior.body?.capped ?? false;
    this.#lease = tenant.lease();
  }

  /** Opens the sandbox's recording, continuing the one a resumed sandbox already has. */
  static async open(opts: RecorderOptions): Promise<Recorder> {
    const tenant = await opts.store.tenant(opts.tenantId);
    let prior: { refs: string[]; body?: RecordingBody } = { refs: [] };
    try {
      const m = await tenant.getManifest(recordingManifestId(opts.sandboxId));
      prior = { refs: m.refs, body: m.body as RecordingBody };
    } catch {
      // A new sandbox (or a fork): its recording starts empty.
    }
    return new Recorder(tenant, opts, prior);
  }

  get capped(): boolean {
    return this.#capped;
  }

  get recordedBytes(): number {
    return this.#recordedBytes;
  }

  /** Records `data` as one piece of content; null once the cap is reached. */
  content(data: Buffer): ContentRef {
    if (!this.#admit(data.length)) return { contentId: null, sizeBytes: data.length };
    if (data.length <= CONTENT_PART_BYTES) return { contentId: this.#enqueue(data), sizeBytes: data.length };
    const parts: string[] = [];
    for (let at = 0; at < data.length; at += CONTENT_PART_BYTES) parts.push(this.#enqueue(data.subarray(at, at + CONTENT_PART_BYTES)));
    return { contentId: this.#enqueue(Buffer.from(parts.join('\n'))), sizeBytes: data.length };
  }

  /**
   * A pass-through for a stream being written elsewhere (a file upload): parts are recorded as they fill, so a large
   * upload is never held whole. `ref()` after the stream ended names the content; null when the cap cut it off.
   */
  tee(): { stream: Transform; ref(): ContentRef } {
    const parts: string[] = [];
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    let sizeBytes = 0;
    let dropped = false;
    const cut = () => {
      const part = Buffer.concat(pending);
      pending = [];
      pendingBytes = 0;
      if (dropped) return;
      if (!this.#admit(part.length)) {
        dropped = true;
        return;
      }
      parts.push(this.#enqueue(part));
    };
    const stream = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        sizeBytes += chunk.length;
        let rest = chunk;
        while (rest.length > 0) {
          const take = Math.min(rest.length, CONTENT_PART_BYTES - pendingBytes);
          pending.push(rest.subarray(0, take));
          pendingBytes += take;
          rest = rest.subarray(take);
          if (pendingBytes === CONTENT_PART_BYTES) cut();
        }
        cb(null, chunk);
      },
      flush(cb) {
        if (pendingBytes > 0 || sizeBytes === 0) cut();
        cb();
      },
    });
    return {
      stream,
      ref: () => {
        if (dropped) return { contentId: null, sizeBytes };
        if (parts.length === 1 && sizeBytes <= CONTENT_PART_BYTES) return { contentId: parts[0]!, sizeBytes };
        return { contentId: this.#enqueue(Buffer.from(parts.join('\n'))), sizeBytes };
      },
    };
  }

  /** Waits for every write so far and commits the manifest naming them. */
  async flush(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  /** Flushes and stops; later content is not recorded. */
  async close(): Promise<void> {
    await this.flush();
    this.#closed = true;
    this.#lease.release();
  }

  /** Removes the recording (its chunks go with the next GC): a sandbox ended without any snapshot cannot be replayed. */
  async discard(): Promise<void> {
    await this.close();
    await this.#tenant.deleteManifest(recordingManifestId(this.#opts.sandboxId)).catch(() => undefined);
  }

  #admit(sizeBytes: number): boolean {
    if (this.#closed || this.#capped) return false;
    if (this.#recordedBytes + sizeBytes > this.#opts.capBytes) {
      this.#capped = true;
      this.#opts.onCapped({ capBytes: this.#opts.capBytes, recordedBytes: this.#recordedBytes });
      this.#schedule();
      return false;
    }
    this.#recordedBytes += sizeBytes;
    return true;
  }

  #enqueue(data: Buffer): string {
    const id = this.#tenant.chunkId(data);
    // Leased before the write starts: a chunk already stored (deduplicated) stays until the manifest names it.
    this.#lease.add(id);
    this.#queue.push({ id, data: Buffer.from(data) });
    this.#schedule();
    return id;
  }

  #schedule(): void {
    if (this.#draining) return;
    this.#draining = this.#drain().finally(() => {
      this.#draining = undefined;
      if (this.#queue.length > 0) this.#schedule();
    });
  }

  async #drain(): Promise<void> {
    const batch = this.#queue.splice(0);
    try {
      // Staged, not put: the manifest's commit makes them durable with one filesystem sync, where a put pays two per
      // chunk (each a process on the local disk: most of the node's CPU in a large upload).
      for (const { id, data } of batch) {
        await this.#tenant.stage(data, id);
        this.#refs.add(id);
      }
      // More input queued meanwhile: commit when it has caught up, or when the last commit is getting old.
      if (this.#queue.length > 0 && performance.now() - this.#committedAt < COMMIT_AT_LEAST_EVERY_MS) return;
      this.#committedAt = performance.now();
      const body: RecordingBody = { kind: 'recording', sandboxId: this.#opts.sandboxId, recordedBytes: this.#recordedBytes, capped: this.#capped };
      await this.#tenant.putManifest(recordingManifestId(this.#opts.sandboxId), { refs: [...this.#refs], body });
    } catch (err) {
      // The input itself succeeded; its content is missing from the recording, which a replay reports at that input.
      this.#opts.logger.warn({ sandboxId: this.#opts.sandboxId, err: (err as Error).message }, 'recording input content failed');
    }
  }
}

/** Reads recorded content back (a replay), verified like every chunk read; `sizeBytes` says whether it has parts. */
export async function readContent(tenant: TenantStore, ref: { contentId: string; sizeBytes: number }): Promise<Buffer> {
  const top = await tenant.get(ref.contentId);
  if (ref.sizeBytes <= CONTENT_PART_BYTES) return top;
  const parts = top.toString('utf8').split('\n');
  return Buffer.concat(await Promise.all(parts.map((id) => tenant.get(id))));
}

/** What a replay's fork is told about its source's recording (spec/gateway.yaml NodeReplayPlan). */
export interface ReplayPlan {
  sourceSandboxId: string;
  sync?: { timeUnixNs: string; entropyContentId: string };
  /** A replay from the source's creation: the placeholders it was created with, as its recording keeps them. */
  placeholdersContentId?: string;
  exchanges: Array<{
    method: string;
    url: string;
    requestBody: { contentId: string; recordedBytes: number };
    status: number;
    responseHeaders: string[][];
    responseBody: { contentId: string; recordedBytes: number };
  }>;
}

/**
 * The source's recording, for a replay's fork: only content its manifest names can be read, so a fork reads nothing
 * of its tenant's store but what the source recorded.
 */
export class SourceRecording {
  private constructor(
    readonly tenant: TenantStore,
    readonly sourceSandboxId: string,
    private readonly refs: Set<string>,
  ) {}

  static async open(store: ChunkStore, tenantId: string, sourceSandboxId: string): Promise<SourceRecording> {
    const tenant = await store.tenant(tenantId);
    let refs: string[];
    try {
      refs = (await tenant.getManifest(recordingManifestId(sourceSandboxId))).refs;
    } catch (err) {
      throw new SandglassError('not_found', `Sandbox ${sourceSandboxId} has no recording to replay (recording was off, or it was discarded).`, {
        cause: err,
        details: { field: 'replay.sourceSandboxId' },
      });
    }
    return new SourceRecording(tenant, sourceSandboxId, new Set(refs));
  }

  /** Verified content of the source's recording (`sizeBytes` absent: content of one chunk); anything else is not found. */
  async read(contentId: string, sizeBytes?: number): Promise<Buffer> {
    if (!this.refs.has(contentId)) {
      throw new SandglassError('not_found', `Content ${contentId} is not in the recording of ${this.sourceSandboxId}.`, { details: { field: 'contentId' } });
    }
    const data = await readContent(this.tenant, { contentId, sizeBytes: sizeBytes ?? 0 });
    if (sizeBytes !== undefined && data.length !== sizeBytes)
      throw new SandglassError('not_found', `Content ${contentId} is not ${sizeBytes} bytes long.`, { details: { field: 'sizeBytes' } });
    return data;
  }

  /**
   * Answers a fork's requests from the recorded exchanges: each recorded exchange answers once, the first unused one
   * with the same method, URL and (redacted) request body — the guest's requests keep their order unless they race.
   */
  answers(exchanges: ReplayPlan['exchanges']): ReplaySource {
    const used = new Set<number>();
    const bodyHashes = new Map<number, Promise<string>>();
    const hashOf = (i: number) => {
      let h = bodyHashes.get(i);
      if (!h) {
        const b = exchanges[i]!.requestBody;
        h = this.read(b.contentId, b.recordedBytes).then((buf) => createHash('sha256').update(buf).digest('hex'));
        bodyHashes.set(i, h);
      }
      return h;
    };
    return {
      answer: async ({ method, url, requestBody }): Promise<RecordedAnswer | undefined> => {
        const want = createHash('sha256').update(requestBody).digest('hex');
        for (let i = 0; i < exchanges.length; i++) {
          const x = exchanges[i]!;
          if (used.has(i) || x.method !== method || x.url !== url || (await hashOf(i)) !== want || used.has(i)) continue;
          used.add(i);
          const body = await this.read(x.responseBody.contentId, x.responseBody.recordedBytes);
          return { status: x.status, headers: x.responseHeaders.map(([k, v]) => [k ?? '', v ?? ''] as [string, string]), body };
        }
        return undefined;
      },
    };
  }
}
