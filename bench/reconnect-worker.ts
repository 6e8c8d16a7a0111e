// A worker thread of the reconnect bench: its share of the clients, with its own HTTP agent, SDK and byte checker.
import { Agent } from 'node:http';
import { parentPort, workerData } from 'node:worker_threads';
import { runShare, sharedState, type Job } from './reconnect-clients.js';

const { clients, buffer } = workerData as { clients: number; buffer: SharedArrayBuffer };
const shared = sharedState(buffer);
const agent = new Agent({ keepAlive: true, maxSockets: clients });
const port = parentPort!;

// The main thread terminates the worker when the bench is done.
port.on('message', (msg: { job: Job; n: number }) => {
  runShare(msg.job, msg.n, clients, agent, shared).then(
    (result) => port.postMessage({ result }),
    (err: unknown) => port.postMessage({ error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
  );
});
port.postMessage({ ready: true });
