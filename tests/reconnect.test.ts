// Reconnects under load with a real VM: many clients re-attach from random offsets while a command writes, every byte checked exactly; then after its exit, and after a pause and resume.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Sandbox, type OutputRead } from '@sandglass/sdk';
import { checkResponsesAgainstSpec, config } from './helpers.js';

checkResponsesAgainstSpec();

/** Line i of the writer's output is `%09d\n` of i: byte o is a digit of line ⌊o/10⌋, so every byte's place is known. */
const LINE_BYTES = 10;
const LINES = 150_000;
const TOTAL_BYTES = LINES * LINE_BYTES;
const WRITER = `
import sys, time
out = sys.stdout.buffer
for i in range(${LINES}):
    out.write(b'%09d\\n' % i)
    if i % 500 == 499:
        out.flush()
        time.sleep(0.01)
out.flush()
`;

function expected(from: number, to: number): Buffer {
  const first = Math.floor(from / LINE_BYTES);
  const last = Math.ceil(to / LINE_BYTES);
  const lines: string[] = [];
  for (let i = first; i < last; i++) lines.push(`${String(i).padStart(9, '0')}\n`);
  return Buffer.from(lines.join(''), 'ascii').subarray(from - first * LINE_BYTES, to - first * LINE_BYTES);
}

/** Every piece contiguous from the offset asked for, on stdout, and exactly the writer's bytes there. */
function check(read: OutputRead, fromOffset: number): void {
  expect(read.startOffset).toBe(fromOffset);
  let at = fromOffset;
  for (const p of read.pieces) {
    expect(p.offset).toBe(at);
    expect(p.fd).toBe(1);
    at += p.bytes.length;
  }
  expect(read.outputOffset).toBe(at);
  const got = Buffer.concat(read.pieces.map((p) => p.bytes));
  const want = expected(fromOffset, at);
  if (!got.equals(want)) throw new Error(`bytes ${fromOffset}..${at} differ from the writer's`);
}

describe('reconnects', () => {
  let sbx: Sandbox;
  beforeAll(async () => {
    sbx = await Sandbox.create({ ...config(), timeoutS: 900 });
  });
  afterAll(async () => {
    await sbx?.kill().catch(() => undefined);
  });

  it('many clients re-attach from random offsets while the command writes and after it exits: every byte once, in place', async () => {
    await sbx.files.write('/root/writer.py', WRITER);
    const handle = await sbx.commands.run('python3 /root/writer.py', { background: true, timeoutMs: 600_000, retainOutput: false });
    let seenEnd = 0;
    let exited = false;
    let whileWriting = 0;
    let total = 0;
    // Deterministic offsets: a failure can be replayed.
    let seed = 12345;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const client = async () => {
      while (!exited || total < 400) {
        // Mostly near the end (a client that just dropped), sometimes far back (older than the gateway's window).
        const from = random() < 0.8 ? Math.max(0, seenEnd - Math.floor(random() * 64 * 1024)) : Math.floor(random() * seenEnd);
        const read = await sbx.commands.readOutput(handle.id, { fromOffset: from });
        check(read, from);
        total++;
        seenEnd = Math.max(seenEnd, read.outputOffset);
        if (read.exit) {
          expect(read.exit.exitCode).toBe(0);
          expect(read.exit.endOffset).toBe(TOTAL_BYTES);
          expect(read.outputOffset).toBe(TOTAL_BYTES);
          exited = true;
        } else {
          whileWriting++;
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, client));
    expect(whileWriting).toBeGreaterThan(20);
    // The first client, over the WebSocket from offset 0, saw the same bytes.
    await handle.wait();
    expect(handle.outputOffset).toBe(TOTAL_BYTES);

    // A handle re-attached from an offset over HTTP follows to the exit with exactly the bytes after it.
    const from = TOTAL_BYTES - 777_777;
    const chunks: Buffer[] = [];
    const again = await sbx.commands.connect(handle.id, { fromOffset: from, onStdoutBytes: (b) => chunks.push(Buffer.from(b)), retainOutput: false });
    const result = await again.wait();
    expect(result.exitCode).toBe(0);
    expect(Buffer.concat(chunks).equals(expected(from, TOTAL_BYTES))).toBe(true);

    // From 0 the bytes come from the guest's ring (older than the gateway keeps), and the exit with them.
    const all = await sbx.commands.readOutput(handle.id, { fromOffset: 0 });
    check(all, 0);
    expect(all.exit?.endOffset).toBe(TOTAL_BYTES);
  });

  it('a command followed over HTTP from its start, while it writes, gets all of it', async () => {
    const chunks: Buffer[] = [];
    const bg = await sbx.commands.run('for i in $(seq 1 2000); do printf "%09d\\n" $((i-1)); done; sleep 1; exit 3', { background: true });
    const follow = await sbx.commands.connect(bg.id, { fromOffset: 0, onStdoutBytes: (b) => chunks.push(Buffer.from(b)), retainOutput: false });
    const err = await follow.wait().catch((e: unknown) => e as { result?: { exitCode: number } });
    expect((err as { result: { exitCode: number } }).result.exitCode).toBe(3);
    expect(Buffer.concat(chunks).equals(expected(0, 20_000))).toBe(true);
    await bg.wait().catch(() => undefined);
  });

  it('offsets continue across a pause and resume: the resumed sandbox serves the same bytes and exit', async () => {
    const done = await sbx.commands.run('python3 /root/writer.py 2>/dev/null | head -c 65546', { background: true });
    await done.wait();
    const before = await sbx.commands.readOutput(done.id, { fromOffset: 1000 });
    await sbx.pause();
    const back = await Sandbox.resume(sbx.id, config());
    sbx = back;
    const after = await back.commands.readOutput(done.id, { fromOffset: 1000 });
    expect(after.startOffset).toBe(1000);
    expect(after.outputOffset).toBe(before.outputOffset);
    expect(Buffer.concat(after.pieces.map((p) => p.bytes)).equals(Buffer.concat(before.pieces.map((p) => p.bytes)))).toBe(true);
    expect(after.exit).toEqual(before.exit);
    expect(after.exit?.endOffset).toBe(65_546);
    check(after, 1000);
  });
});
