// `npx tsx bench/templates.ts`: a template's cold boot on one node against publishing it to the chunk store and
// materializing it on a node that never had it (same process, same image: the ratio is the figure).
import { mkdirSync, mkdtempSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Table from 'cli-table3';
import { ChunkStore, LocalDiskBackend } from '@sandglass/chunkstore';
import { createLogger, homeLayout } from '@sandglass/core';
import { TEMPLATE_TENANT, TemplateStore, vmConfig, type TemplateRef, type TemplateRegistry } from '@sandglass/gateway';
import { defaultKernelArgs, ensureGuestImage } from '@sandglass/images';
import { LocalKeyring } from '@sandglass/kms';

const MIB = 1024 * 1024;
const source = homeLayout();
const work = mkdtempSync(join(tmpdir(), 'sg-bench-templates-'));
const log = createLogger('bench', 'warn');

/** A home whose artifacts are the guest image's parts only (links), so its template cache starts empty. */
function nodeHome(name: string): string {
  const artifacts = join(work, name, 'artifacts');
  mkdirSync(artifacts, { recursive: true });
  for (const entry of readdirSync(source.artifacts)) {
    if (!entry.startsWith('template-') && entry !== 'accel.json') symlinkSync(join(source.artifacts, entry), join(artifacts, entry));
  }
  return artifacts;
}

try {
  const image = await ensureGuestImage({ home: source.root });
  const kernelArgs = defaultKernelArgs().join(' ');
  // TCG: this is what every host can run, and where a boot costs the most.
  const config = vmConfig(256, 1, 'tcg', 'max');
  const store = new ChunkStore({ backend: new LocalDiskBackend(join(work, 'store')), keys: new LocalKeyring({ dir: join(work, 'keys') }) });
  const records = new Map<string, TemplateRef>();
  const registry: TemplateRegistry = {
    lookup: async (k) => records.get(k),
    publish: async (k, rec) => {
      if (!records.has(k)) records.set(k, { tenantId: rec.tenantId, snapshotId: rec.snapshotId });
      return records.get(k)!;
    },
  };

  // Node A: boots the template, then publishes it (ensure does both; the boot is timed apart from the whole).
  let t0 = performance.now();
  const a = new TemplateStore(nodeHome('a'), image, kernelArgs, log, { store, registry, nodeId: 'a' });
  const built = await a.ensure('base', config);
  const buildAndPublishMs = performance.now() - t0;
  const [ref] = [...records.values()];
  const tenant = await store.tenant(TEMPLATE_TENANT);
  const { body } = await tenant.getManifest(ref!.snapshotId);
  const storedBytes = (body as { stats: { storedBytes: number } }).stats.storedBytes;

  // Node B: nothing cached; materializes the registry's template.
  t0 = performance.now();
  const b = new TemplateStore(nodeHome('b'), image, kernelArgs, log, { store, registry, nodeId: 'b' });
  const fetched = await b.ensure('base', config);
  const materializeMs = performance.now() - t0;

  // Node C: the same boot without publishing, the baseline.
  t0 = performance.now();
  await new TemplateStore(nodeHome('c'), image, kernelArgs, log).ensure('base', config);
  const coldMs = performance.now() - t0;

  const table = new Table({ head: ['template (256 MiB, 1 vCPU, TCG)', 'ms', 'vs cold boot'] });
  table.push(
    ['cold boot + snapshot (node C)', Math.round(coldMs), '1.00'],
    ['  of which to agent ready (node A)', Math.round(built.bootMs), (built.bootMs / coldMs).toFixed(2)],
    ['boot + publish (node A)', Math.round(buildAndPublishMs), (buildAndPublishMs / coldMs).toFixed(2)],
    ['materialize from the store (node B)', Math.round(materializeMs), (materializeMs / coldMs).toFixed(2)],
  );
  console.log(table.toString());
  console.log(`stored: ${(storedBytes / MIB).toFixed(1)} MiB of chunks; node B recorded materializeMs ${Math.round(fetched.materializeMs ?? 0)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
