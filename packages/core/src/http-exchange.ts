// One HTTP request between Sandglass nodes (control plane ↔ gateway), its answer read whole as text, all of it bounded
// by a timeout; resent once when a kept-alive connection the peer closed as idle is reset just as it is reused.
import { request as httpRequest, type RequestOptions } from 'node:http';
import { request as httpsRequest } from 'node:https';

export interface HttpExchange {
  status: number;
  text: string;
}

export interface HttpExchangeRequest {
  /** The request's target; without it, `options` name it (host and port, or socketPath, and path). */
  url?: URL;
  options: RequestOptions;
  /** TLS (node:https); the default follows `url`'s protocol. */
  https?: boolean;
  body?: string;
  timeoutMs: number;
}

/**
 * Sends the request and reads the whole answer. A timeout rejects with the signal's TimeoutError. A connection error on
 * a reused kept-alive connection before any answer means the peer closed it as idle as we sent: the request never
 * reached it, so it is sent once more on a new connection; any other failure rejects.
 */
export function httpExchange(req: HttpExchangeRequest): Promise<HttpExchange> {
  const signal = AbortSignal.timeout(req.timeoutMs);
  const request = (req.https ?? req.url?.protocol === 'https:') ? httpsRequest : httpRequest;
  const options = { ...req.options, signal };
  const attempt = (mayResend: boolean): Promise<HttpExchange> =>
    new Promise((resolve, reject) => {
      let answered = false;
      const onAnswer = (res: import('node:http').IncomingMessage) => {
        answered = true;
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (err) => reject(signal.aborted ? signal.reason : err));
      };
      const r = req.url ? request(req.url, options, onAnswer) : request(options, onAnswer);
      r.on('error', (err: NodeJS.ErrnoException) => {
        if (signal.aborted) return reject(signal.reason);
        if (mayResend && !answered && r.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE')) {
          return resolve(attempt(false));
        }
        reject(err);
      });
      r.end(req.body);
    });
  return attempt(true);
}
