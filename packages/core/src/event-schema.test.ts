// spec/events.yaml against its validator and against the code: every example fits, every mutation is named, every
// event type some package appends is in the spec.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { EVENT_TYPES, eventDataProblem, eventSpec, isEventType, type EventType } from './event-schema.js';

const root = fileURLToPath(new URL('../../..', import.meta.url));
interface Entry {
  scope: string;
  node: boolean;
  data: { required?: string[]; properties?: Record<string, unknown> };
  example: Record<string, unknown>;
}
const spec = parse(readFileSync(join(root, 'spec/events.yaml'), 'utf8')) as { events: Record<string, Entry> };

describe('spec/events.yaml', () => {
  it('is what the generated EVENT_SPECS hold (npm run gen)', () => {
    expect(EVENT_TYPES).toEqual(Object.keys(spec.events));
    for (const t of EVENT_TYPES) expect(eventSpec(t)).toEqual({ scope: spec.events[t]!.scope, node: spec.events[t]!.node });
  });

  it('gives every type an example that fits its schema', () => {
    for (const t of EVENT_TYPES) expect(eventDataProblem(t, spec.events[t]!.example), t).toBeUndefined();
  });

  it('fits what a disk-only pause and a pooled or cold-booted start record, and nothing else in their place', () => {
    const snap = 'snap_aaaaaaaaaaaaaaaaaaaa';
    expect(eventDataProblem('sandbox.paused', { snapshotId: snap, memory: false })).toBeUndefined();
    expect(eventDataProblem('sandbox.paused', { snapshotId: snap, memory: true })?.field).toBe('/data/memory');
    expect(eventDataProblem('snapshot.taken', { ...spec.events['snapshot.taken']!.example, memory: false })).toBeUndefined();
    expect(eventDataProblem('sandbox.resumed', { snapshotId: snap, coldBoot: true })).toBeUndefined();
    expect(eventDataProblem('sandbox.resumed', { snapshotId: snap, coldBoot: 'yes' })?.field).toBe('/data/coldBoot');
    const started = { pid: 1, vmId: 'pool_0123456789abcdef', restoreMs: 1, prepareMs: 2, pooled: true, template: 'base', accel: 'tcg' };
    expect(eventDataProblem('sandbox.started', started)).toBeUndefined();
    expect(eventDataProblem('sandbox.started', { ...started, coldBoot: true })).toBeUndefined();
  });

  it('names the field of every mutation of an example: one more field, one missing, one of the wrong shape', () => {
    for (const t of EVENT_TYPES) {
      const { example, data } = spec.events[t]!;
      expect(eventDataProblem(t, { ...example, forged: 1 }), t).toMatchObject({ field: '/data/forged' });
      for (const name of data.required ?? []) {
        const { [name]: _gone, ...rest } = example;
        expect(eventDataProblem(t, rest), `${t} without ${name}`).toMatchObject({ field: `/data/${name}` });
      }
      for (const name of Object.keys(data.properties ?? {})) {
        const problem = eventDataProblem(t, { ...example, [name]: { forged: true } });
        expect(problem?.field, `${t} with an object for ${name}`).toMatch(new RegExp(`^/data/${name}(/|$)`));
      }
    }
  });

  it('refuses data that is not an object, and knows no type outside the spec', () => {
    expect(eventDataProblem('sandbox.paused', 7)).toMatchObject({ field: '/data' });
    expect(eventDataProblem('sandbox.paused', null)).toMatchObject({ field: '/data' });
    expect(isEventType('command.forged')).toBe(false);
    expect(isEventType('toString')).toBe(false);
    expect(isEventType('sandbox.paused')).toBe(true);
  });

  it('lists every event type a package appends', () => {
    // The ways code names the type of an event it appends: an object's `type:`, record('…'), #append('…'), cadenceEvent(x, '…').
    const appended = /(?:\btype: |\brecord\(|#append\(|cadenceEvent\(\w+, )['`]([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)['`]/g;
    const found = new Map<string, string[]>();
    const walk = (dir: string) => {
      for (const name of readdirSync(dir)) {
        const path = join(dir, name);
        if (statSync(path).isDirectory()) {
          if (name !== 'node_modules' && name !== 'dist') walk(path);
        } else if (/\.tsx?$/.test(name) && !/\.(test|generated)\.tsx?$/.test(name) && name !== 'test-support.ts') {
          for (const m of readFileSync(path, 'utf8').matchAll(appended)) found.set(m[1]!, [...(found.get(m[1]!) ?? []), path.slice(root.length)]);
        }
      }
    };
    for (const pkg of readdirSync(join(root, 'packages'))) {
      const src = join(root, 'packages', pkg, 'src');
      if (statSync(join(root, 'packages', pkg)).isDirectory() && readdirSync(join(root, 'packages', pkg)).includes('src')) walk(src);
    }
    // The scan must see the appends it guards: a regex that matches nothing would pass.
    for (const t of ['sandbox.created', 'sandbox.started', 'command.started', 'egress.request', 'snapshot.behind', 'key.rotated', 'port.request']) {
      expect(found.has(t), `the scan found no append of ${t}`).toBe(true);
    }
    const unlisted = [...found].filter(([t]) => !isEventType(t)).map(([t, where]) => `${t} (${where.join(', ')})`);
    expect(unlisted, 'event types appended but missing from spec/events.yaml').toEqual([]);
    // A node may send exactly the types the gateway package appends (and the GC report it shares with the control plane).
    const gatewayTypes = [...found].filter(([, where]) => where.some((w) => /^packages\/(gateway|egress)\//.test(w))).map(([t]) => t as EventType);
    for (const t of gatewayTypes) expect(eventSpec(t).node, `${t} is recorded by gateways`).toBe(true);
  });
});
