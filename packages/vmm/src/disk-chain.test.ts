// The host's record of a VM's disk layers against a QMP double that names other VMs' layers: every lie is refused.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Vm } from './qemu.js';
import { vmOnQmpDouble, type QmpDouble } from './qmp-double.js';

let root: string;
let vm: Vm | undefined;

afterEach(async () => {
  vm?.kill();
  await vm?.exited;
  vm = undefined;
  rmSync(root, { recursive: true, force: true });
});

/** Two VMs' run directories and a template's frozen layer; VM a is driven by a QMP double. */
async function setup(): Promise<{ vm: Vm; qmp: QmpDouble; own: string; victim: string; template: string; dir: string }> {
  root = mkdtempSync(join(tmpdir(), 'sg-chain-'));
  const dir = join(root, 'run', 'sbx_a');
  const other = join(root, 'run', 'sbx_b');
  const tpl = join(root, 'template-k');
  for (const d of [dir, other, tpl]) mkdirSync(d, { recursive: true });
  const own = join(dir, 'disk.qcow2');
  const victim = join(other, 'disk.qcow2');
  const template = join(tpl, 'disk.qcow2');
  writeFileSync(own, 'own layer');
  writeFileSync(victim, 'VICTIM LAYER');
  writeFileSync(template, 'template layer');
  writeFileSync(join(dir, 'mem.raw'), Buffer.alloc(4096));
  const made = await vmOnQmpDouble({ id: 'sbx_a', dir, memPath: join(dir, 'mem.raw'), rootLayer: own, chain: [own, template] });
  vm = made.vm;
  return { ...made, own, victim, template, dir };
}

describe('a VM whose QEMU reports its disk chain', () => {
  it('gets back its own layers, by the names the host gave them, when QEMU tells the truth', async () => {
    const { vm, qmp, own, template } = await setup();
    expect(await vm.ownDiskLayers(template)).toEqual([own]);
    // Below the template lies its own chain (its raw root image): the template's business, not this VM's.
    qmp.chain = [own, template, '/artifacts/rootfs.ext4'];
    expect(await vm.ownDiskLayers(template)).toEqual([own]);
  });

  it.each([
    ['names another VM’s layer as its active one', (c: { victim: string; template: string; own: string }) => [c.victim, c.template]],
    ['slips another VM’s layer between its own and the template', (c: { victim: string; template: string; own: string }) => [c.own, c.victim, c.template]],
    ['puts another VM’s layer where the template should be', (c: { victim: string; template: string; own: string }) => [c.own, c.victim]],
    ['names the template as its own writable layer', (c: { victim: string; template: string; own: string }) => [c.template]],
    ['leaves the template out', (c: { victim: string; template: string; own: string }) => [c.own]],
  ])('refuses a chain that %s, and the victim is untouched', async (_what, lie) => {
    const c = await setup();
    c.qmp.chain = lie(c);
    await expect(c.vm.ownDiskLayers(c.template)).rejects.toMatchObject({ code: 'vm_reply_refused', details: { field: 'query-block' } });
    expect(readFileSync(c.victim, 'utf8')).toBe('VICTIM LAYER');
  });

  it('refuses its own layer once it is a symlink to another VM’s, though QEMU names it truthfully', async () => {
    const { vm, own, victim, template } = await setup();
    rmSync(own);
    symlinkSync(victim, own);
    await expect(vm.ownDiskLayers(template)).rejects.toMatchObject({ code: 'vm_reply_refused' });
  });

  it('follows a live snapshot and a merge by its own record, and refuses QEMU reporting the chain from before', async () => {
    const { vm, qmp, own, template, dir } = await setup();
    const layer1 = join(dir, 'layer-1.qcow2');
    const layer2 = join(dir, 'layer-2.qcow2');
    for (const [i, layer] of [layer1, layer2].entries()) {
      await vm.captureLive({ statePath: join(dir, `s${i}.state`), memCopyPath: join(dir, `m${i}.copy`), newLayerPath: layer });
      writeFileSync(layer, `layer ${i + 1}`);
    }
    expect(await vm.ownDiskLayers(template)).toEqual([layer2, layer1, own]);
    await vm.commitLayer(layer1, own);
    expect(await vm.ownDiskLayers(template)).toEqual([layer2, own]);
    qmp.chain = [layer2, layer1, own, template];
    await expect(vm.ownDiskLayers(template)).rejects.toMatchObject({ code: 'vm_reply_refused' });
    expect(existsSync(layer1)).toBe(true);
  });

  it('writes no device state through a link QEMU planted where the state file goes', async () => {
    const { vm, victim, dir } = await setup();
    symlinkSync(victim, join(dir, 'planted.state'));
    await expect(
      vm.captureLive({ statePath: join(dir, 'planted.state'), memCopyPath: join(dir, 'm.copy'), newLayerPath: join(dir, 'layer-1.qcow2') }),
    ).rejects.toThrow(/ELOOP/);
    expect(readFileSync(victim, 'utf8')).toBe('VICTIM LAYER');
  });
});

describe('a VM whose RAM is mapped privately', () => {
  // Its RAM file is the template's image, not its memory: a capture copying it would lose every page the guest wrote.
  it('refuses live and paused snapshots before it stops the guest, and copies nothing', async () => {
    const { vm, qmp, dir } = await setup();
    vm.privateRam = true;
    const copy = join(dir, '..', 'copy.mem');
    const live = vm.captureLive({ statePath: join(dir, '..', 'state'), memCopyPath: copy, newLayerPath: join(dir, 'next.qcow2') });
    await expect(live).rejects.toMatchObject({ code: 'internal', message: expect.stringMatching(/maps its RAM privately/) });
    await expect(vm.saveSnapshot(join(dir, '..', 'state'))).rejects.toMatchObject({ code: 'internal' });
    expect(qmp.commands.map((c) => c.execute)).not.toContain('stop');
    expect(existsSync(copy)).toBe(false);
  });
});
