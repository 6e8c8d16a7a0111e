// The shape of an event in the one log, as appended and as stored (each type's data: spec/events.yaml, core's EventData<T>).

/** Lowercase dotted names: `sandbox.created`, `file.dir_created`. */
export const EVENT_TYPE_PATTERN = /^[a-z][a-z_]*(\.[a-z][a-z_]*)+$/;

export interface AppendInput {
  type: string;
  tenantId: string;
  /** Required for `sandbox.*` events. */
  sandboxId?: string;
  data: Record<string, unknown>;
  /**
   * Given by a gateway that recorded the event earlier (its outbox): the append is then idempotent by id, and `at`
   * keeps the time it happened rather than the time it arrived. Absent: a new id, and now.
   */
  id?: string;
  at?: string;
}

/** An event as stored: what `list` returns and the API serves. */
export interface StoredEvent {
  seq: number;
  id: string;
  type: string;
  tenantId: string;
  sandboxId: string | null;
  /** ISO-8601 UTC. */
  at: string;
  data: Record<string, unknown>;
  prevHash: string;
  /**
   * The hash of the previous event of the same sandbox (GENESIS_HASH for its first): the sandbox's own chain, which an
   * export of that sandbox alone can verify. Absent on events without a sandbox and on those written before it existed.
   */
  sandboxPrevHash?: string;
  hash: string;
}
