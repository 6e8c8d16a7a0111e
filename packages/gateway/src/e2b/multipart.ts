// A streaming multipart/form-data reader for envd's POST /files: each part's body is handed on as a stream while
// it arrives, so an upload never sits whole in the gateway's memory.
import { PassThrough, type Readable } from 'node:stream';

export const MAX_PART_HEADER_BYTES = 16 * 1024;
export const MAX_PARTS = 1000;

export class MultipartError extends Error {}

export interface PartInfo {
  /** The form field's name (`name=` of Content-Disposition). */
  name: string;
  /** `filename=` of Content-Disposition, when given. */
  filename?: string;
}

/** The boundary parameter of a multipart/form-data Content-Type, or undefined when it has none. */
export function multipartBoundary(contentType: string | undefined): string | undefined {
  if (!contentType || !/^multipart\/form-data\s*(;|$)/i.test(contentType)) return undefined;
  const m = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;"]{1,70}))/i.exec(contentType);
  return m?.[1] ?? m?.[2];
}

/** A Content-Disposition parameter: a quoted string (backslash escapes) or a token. */
function dispositionParam(value: string, param: string): string | undefined {
  const re = new RegExp(`;\\s*${param}\\s*=\\s*(?:"((?:[^"\\\\]|\\\\.)*)"|([^;\\s]+))`, 'i');
  const m = re.exec(value);
  if (!m) return undefined;
  return m[1] !== undefined ? m[1].replace(/\\(.)/g, '$1') : m[2];
}

function parseHeaders(block: string): PartInfo {
  let disposition: string | undefined;
  for (const line of block.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) throw new MultipartError(`malformed part header ${JSON.stringify(line.slice(0, 80))}`);
    if (line.slice(0, colon).trim().toLowerCase() === 'content-disposition') disposition = line.slice(colon + 1).trim();
  }
  if (!disposition || !/^form-data\s*(;|$)/i.test(disposition)) throw new MultipartError('every part needs Content-Disposition: form-data');
  const name = dispositionParam(disposition, 'name');
  if (name === undefined) throw new MultipartError('a part has no name');
  return { name, filename: dispositionParam(disposition, 'filename') };
}

/**
 * Reads `body` part by part: `onPart` gets each part's headers and a stream of its bytes, and the next part is read
 * only once the promise it returned settled (it must consume or destroy the stream). Input is read only as fast as
 * the part's consumer takes it. Rejects on a malformed body, and with onPart's own failure. Pass an iterator that
 * does not destroy its source when left early (`raw.iterator({ destroyOnReturn: false })`) to answer afterwards.
 */
export async function forEachPart(body: AsyncIterable<Buffer>, boundary: string, onPart: (info: PartInfo, data: Readable) => Promise<void>): Promise<void> {
  const delimiter = Buffer.from(`\r\n--${boundary}`);
  // The first boundary is not preceded by CRLF: pretend it is, so every boundary is found the same way.
  let buf = Buffer.from('\r\n');
  let state: 'preamble' | 'after-boundary' | 'headers' | 'body' | 'done' = 'preamble';
  let part: PassThrough | undefined;
  let handling: Promise<void> | undefined;
  let parts = 0;

  const finishPart = async () => {
    part!.end();
    await handling;
    part = undefined;
    handling = undefined;
  };

  /** Writes to the current part, waiting while its consumer is behind; its failure ends the wait. */
  const write = async (bytes: Buffer) => {
    if (bytes.length === 0 || part!.write(bytes)) return;
    await Promise.race([new Promise((r) => part!.once('drain', r)), handling]);
  };

  try {
    for await (const chunk of body) {
      // The epilogue after the closing boundary is read and ignored.
      if (state === 'done') continue;
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        if (state === 'preamble' || state === 'body') {
          const at = buf.indexOf(delimiter);
          if (at < 0) {
            // Keep a tail that may be the start of a delimiter split across chunks.
            const keep = Math.min(buf.length, delimiter.length - 1);
            if (state === 'body') await write(buf.subarray(0, buf.length - keep));
            buf = buf.subarray(buf.length - keep);
            break;
          }
          if (state === 'body') {
            await write(buf.subarray(0, at));
            await finishPart();
          }
          buf = buf.subarray(at + delimiter.length);
          state = 'after-boundary';
        }
        if (state === 'after-boundary') {
          if (buf.length < 2) break;
          if (buf[0] === 0x2d && buf[1] === 0x2d) {
            state = 'done';
            break;
          }
          // Transport padding (spaces, tabs) may follow a boundary before its CRLF.
          const eol = buf.indexOf('\r\n');
          if (eol < 0) {
            if (buf.length > 1024) throw new MultipartError('malformed boundary line');
            break;
          }
          if (!/^[ \t]*$/.test(buf.subarray(0, eol).toString('latin1'))) throw new MultipartError('malformed boundary line');
          buf = buf.subarray(eol + 2);
          state = 'headers';
        }
        if (state === 'headers') {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) {
            if (buf.length > MAX_PART_HEADER_BYTES) throw new MultipartError(`part headers are limited to ${MAX_PART_HEADER_BYTES} bytes`);
            break;
          }
          if (end > MAX_PART_HEADER_BYTES) throw new MultipartError(`part headers are limited to ${MAX_PART_HEADER_BYTES} bytes`);
          if (++parts > MAX_PARTS) throw new MultipartError(`at most ${MAX_PARTS} parts per request`);
          const info = parseHeaders(buf.subarray(0, end).toString('utf8'));
          buf = buf.subarray(end + 4);
          part = new PassThrough();
          handling = onPart(info, part);
          // Observed by finishPart or write; a consumer failing early must not go unhandled meanwhile.
          handling.catch(() => {});
          state = 'body';
          continue;
        }
        if (state === 'done') break;
      }
    }
    if (state !== 'done') throw new MultipartError('the multipart body ended before its closing boundary');
  } catch (err) {
    part?.destroy(err as Error);
    if (handling) await handling.catch(() => {});
    throw err;
  }
}
