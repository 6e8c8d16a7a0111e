// What the guest-port tests share: the server they start in the guest (Python standard library only, all the base image
// has) and a request to the gateway's data plane with a Host header of the test's choosing.
import http from 'node:http';
import { gatewayUrl } from './helpers.js';

const gw = new URL(gatewayUrl);

/**
 * A preview page as a dev server serves one: its script opens a WebSocket to its own host's /ws and shows what comes
 * back, so a browser proves the page, its cookie and the upgrade all went through the port route.
 */
const PREVIEW_PAGE = `<!doctype html><title>guest preview</title><p id="ws">connecting</p>
<script>
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
ws.onopen = () => ws.send('from-the-page');
ws.onmessage = (e) => { document.getElementById('ws').textContent = e.data; };
ws.onerror = () => { document.getElementById('ws').textContent = 'websocket failed'; };
</script>`;

/**
 * The tests' own HTTP server (argument: the port): a body hashed, bytes streamed, server-sent events, a WebSocket echo
 * (RFC 6455 handshake and one masked frame each way), the preview page at /, and every other request's headers echoed.
 */
export const PORT_APP = String.raw`
import base64, hashlib, http.server, json, socketserver, sys
PREVIEW = b'''${PREVIEW_PAGE}'''
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *a): pass
    def reply(self, status, body, ctype='application/octet-stream'):
        self.send_response(status); self.send_header('Content-Type', ctype); self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        n = int(self.headers.get('Content-Length', '0')); h = hashlib.sha256(); left = n
        while left > 0:
            b = self.rfile.read(min(left, 1 << 20))
            if not b: break
            h.update(b); left -= len(b)
        self.reply(200, json.dumps({'sha256': h.hexdigest(), 'bytes': n - left}).encode(), 'application/json')
    def do_GET(self):
        if self.path.startswith('/big/'):
            mib = int(self.path.split('/')[2]); block = bytes(range(256)) * 4096
            self.send_response(200); self.send_header('Content-Length', str(mib << 20)); self.end_headers()
            for _ in range(mib): self.wfile.write(block)
        elif self.path == '/sse':
            self.send_response(200); self.send_header('Content-Type', 'text/event-stream'); self.send_header('Cache-Control', 'no-cache'); self.end_headers()
            for i in range(3): self.wfile.write(('data: tick %d\n\n' % i).encode()); self.wfile.flush()
            self.close_connection = True
        elif self.path == '/ws':
            acc = base64.b64encode(hashlib.sha1((self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').encode()).digest()).decode()
            self.send_response(101); self.send_header('Upgrade', 'websocket'); self.send_header('Connection', 'Upgrade'); self.send_header('Sec-WebSocket-Accept', acc); self.end_headers(); self.wfile.flush()
            b0, b1 = self.rfile.read(2); n = b1 & 127
            if n == 126: n = int.from_bytes(self.rfile.read(2), 'big')
            mask = self.rfile.read(4); data = bytes(c ^ mask[i % 4] for i, c in enumerate(self.rfile.read(n)))
            out = b'echo:' + data
            self.wfile.write(bytes([0x81, len(out)]) + out); self.wfile.write(b'\x88\x00'); self.wfile.flush(); self.close_connection = True
        elif self.path == '/':
            self.reply(200, PREVIEW, 'text/html; charset=utf-8')
        else:
            self.reply(200, json.dumps({'path': self.path, 'headers': dict(self.headers.items())}).encode(), 'application/json')
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
`;

export interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** One request to the gateway's data plane with Node's http (a Host header of our choosing, no redirects followed). */
export function send(
  path: string,
  opts: { method?: string; headers?: Record<string, string>; body?: Buffer | (() => AsyncIterable<Buffer>) } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: gw.hostname, port: gw.port, path, method: opts.method ?? 'GET', headers: opts.headers }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    const body = opts.body;
    if (body === undefined) req.end();
    else if (Buffer.isBuffer(body)) req.end(body);
    else
      void (async () => {
        for await (const c of body()) if (!req.write(c)) await new Promise((r) => req.once('drain', r));
        req.end();
      })();
  });
}
