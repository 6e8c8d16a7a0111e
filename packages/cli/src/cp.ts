// `cp`: one file between this machine and a sandbox, streamed both ways, with a progress bar on a terminal.
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import { basename, join, posix } from 'node:path';
import { PassThrough, Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { Sandbox } from '@sandglass/sdk';
import { UsageError, type CpPlan } from './args.js';

async function localStat(path: string) {
  return stat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return undefined;
    throw err;
  });
}

/** Counts bytes through a progress bar on stderr when it is a terminal; a plain pass-through otherwise. */
async function progress(totalBytes: number | undefined, label: string): Promise<{ stream: PassThrough; stop: () => void }> {
  const stream = new PassThrough();
  if (!process.stderr.isTTY || !totalBytes) return { stream, stop: () => undefined };
  const { SingleBar, Presets } = (await import('cli-progress')).default;
  const bar = new SingleBar(
    { format: `${label} [{bar}] {percentage}% | {value}/{total} MiB`, stream: process.stderr, hideCursor: true },
    Presets.shades_classic,
  );
  const mib = (n: number) => Math.round((n / 1048576) * 10) / 10;
  let done = 0;
  bar.start(mib(totalBytes), 0);
  stream.on('data', (c: Buffer) => bar.update(mib((done += c.length))));
  return { stream, stop: () => bar.stop() };
}

export async function copy(plan: CpPlan): Promise<void> {
  if (plan.direction === 'upload') await upload(plan);
  else await download(plan);
}

async function upload(plan: Extract<CpPlan, { direction: 'upload' }>): Promise<void> {
  const sbx = await Sandbox.connect(plan.to.sandboxId);
  let target = plan.to.path;
  let source: Readable;
  let sizeBytes: number | undefined;
  if (plan.from.kind === 'stdio') {
    source = process.stdin;
  } else {
    const st = await localStat(plan.from.path);
    if (!st) throw new UsageError(`cp: ${plan.from.path}: no such file`);
    if (st.isDirectory()) throw new UsageError(`cp: ${plan.from.path} is a directory; cp copies one file`);
    sizeBytes = st.size;
    source = createReadStream(plan.from.path);
    // Like cp(1): into a directory keeps the file's own name.
    if (
      target.endsWith('/') ||
      (await sbx.files.stat(target).then(
        (i) => i.type === 'dir',
        () => false,
      ))
    ) {
      target = posix.join(target, basename(plan.from.path));
    }
  }
  const bar = await progress(sizeBytes, basename(target));
  try {
    // pipeline, not pipe: a read error on the source must abort the upload instead of leaving it waiting for more bytes.
    await Promise.all([pipeline(source, bar.stream), sbx.files.write(target, bar.stream)]);
  } finally {
    bar.stop();
  }
}

async function download(plan: Extract<CpPlan, { direction: 'download' }>): Promise<void> {
  const sbx = await Sandbox.connect(plan.from.sandboxId);
  const info = await sbx.files.stat(plan.from.path);
  if (info.type === 'dir') throw new UsageError(`cp: ${plan.from.sandboxId}:${plan.from.path} is a directory; cp copies one file`);
  const body = Readable.fromWeb((await sbx.files.read(plan.from.path, { format: 'stream' })) as WebReadableStream<Uint8Array>);
  if (plan.to.kind === 'stdio') {
    await pipeline(body, process.stdout as Writable, { end: false });
    return;
  }
  // Like cp(1), into a directory under the name asked for: never a name the sandbox reports, which a replaced guest
  // agent could make `../../.bashrc`.
  const name = posix.basename(posix.normalize(plan.from.path));
  let target = plan.to.path;
  if ((await localStat(target))?.isDirectory()) target = join(target, name);
  // Written beside the target and renamed into place, so a failed copy never leaves a truncated file under the real name.
  const partial = `${target}.sandglass-partial`;
  const bar = await progress(info.sizeBytes, name);
  try {
    await pipeline(body, bar.stream, createWriteStream(partial));
    await rename(partial, target);
  } catch (err) {
    await rm(partial, { force: true });
    throw err;
  } finally {
    bar.stop();
  }
}
