// GENERATED from spec/gateway.yaml by scripts/gen.ts (openapi-typescript). Do not edit by hand: run `npm run gen`.

export interface paths {
    "/v1/health": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["health"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get: operations["listCommands"];
        put?: never;
        /** @description Starts a command. Exactly one of cmd or argv. Output is kept in a bounded buffer addressed by byte offsets. */
        post: operations["startCommand"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        get: operations["getCommand"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}/stream": {
        parameters: {
            query?: {
                fromOffset?: number;
                access_token?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        /**
         * @description WebSocket. Server to client - binary frames `fd:u8 (1 stdout, 2 stderr) | offset:u64 BE | bytes`;
         *     text frames JSON `{type:"start", startOffset, command}` first, `{type:"exit", exitCode, signal, timedOut, endOffset}`
         *     last, then close. `startOffset` greater than `fromOffset` means older bytes were dropped from the bounded buffer.
         *     If the stream fails after the upgrade (the sandbox stopped, the agent went away) the server sends
         *     `{type:"error", error:{code, message, requestId}}` and closes with status 1011.
         *     Client to server - binary frames are stdin bytes; text JSON `{type:"stdin_eof"}`, `{type:"resize", cols, rows}`,
         *     `{type:"signal", signal}`.
         */
        get: operations["streamCommand"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}/output": {
        parameters: {
            query?: {
                fromOffset?: number;
                follow?: boolean;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        /**
         * @description A reconnect in one request (HTTP keep-alive, no WebSocket handshake): the command's output after `fromOffset`
         *     and its exit once it has exited. The body is a sequence of records `length:u32 BE | frame`, where a frame is
         *     what the stream route sends: `fd:u8 (1 stdout, 2 stderr) | offset:u64 BE | bytes`, or `0:u8 | JSON` for
         *     `{type:"start", startOffset, command}` (always first), `{type:"exit", exitCode, signal, timedOut, endOffset}`
         *     (last, once the command has exited) and `{type:"error", error}` (the read failed; last).
         *     Without `follow` the answer holds what is there now and ends; with `follow=true` it goes on until the exit.
         *     A body that ends without exit or error ends early: ask again from the last offset received.
         *     `startOffset` greater than `fromOffset` means older bytes were dropped from the bounded buffer.
         *     Recent output is served from the gateway's copy of it (no round trip to the guest).
         */
        get: operations["readCommandOutput"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}/stdin": {
        parameters: {
            query?: {
                eof?: boolean;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["sendStdin"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}/signal": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["signalCommand"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/commands/{cid}/resize": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["resizeCommand"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files": {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get: operations["readFile"];
        put: operations["writeFile"];
        post?: never;
        delete: operations["removeFile"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/tar": {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        /** @description The directory at `path` as a tar stream (POSIX/PAX), packed in the guest as it is sent: names relative to the directory, symlinks stored as symlinks (never followed), files linked more than once as hard links; sockets, FIFOs and devices are left out. */
        get: operations["readDirTar"];
        /** @description Extracts a tar stream into the directory at `path` (created with its parents) as it arrives. Nothing is written outside that directory: absolute names, `..` components and paths through symlinks are refused (invalid_argument), and a symlink where a file goes is replaced, never written through. Regular files, directories, symlinks and hard links are extracted with their mode and mtime; owners in the archive are ignored (entries belong to root). Existing files and symlinks are replaced (unlinked first, as tar does); on a failure, entries extracted before it stay. Limited to 1,000,000 entries and to the upload size of PUT /files. */
        put: operations["writeDirTar"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/recording/{contentId}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                contentId: components["schemas"]["ContentId"];
            };
            cookie?: never;
        };
        /** @description For a replay's fork only: one piece of its source's recorded input (a command's spec, stdin bytes, a file's content), by the content id and size its event gives. Content not in the source's recording is not found. */
        get: operations["readRecordedContent"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/stat": {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get: operations["statFile"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/list": {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
                depth?: number;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get: operations["listFiles"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/mkdir": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["makeDir"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/metrics": {
        parameters: {
            query?: {
                /** @description Only samples at or after this time */
                start?: string;
                /** @description Only samples at or before this time */
                end?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        /** @description The running sandbox's CPU, memory and disk over the last hour. */
        get: operations["getMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/ports": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        /** @description The guest's listening TCP sockets (the agent reads /proc/net/tcp and tcp6), each with whether it is public. A listening socket is reached at /v1/sandboxes/{id}/ports/{port}/… or <port>-<id>.<domain>; those relayed routes are the guest server's, not described here. */
        get: operations["listPorts"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/public-ports/{port}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                port: number;
            };
            cookie?: never;
        };
        get?: never;
        /** @description Opens a port to requests without any credential, or makes it private again (the default). Each change is a `port.visibility` event. */
        put: operations["setPortPublic"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/port-urls": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description A short-lived signed URL for a browser: its first use answers 302 with a cookie scoped to that sandbox port's host (or path) and the token gone from the address. The token opens only this port of this sandbox. */
        post: operations["createPortUrl"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/sandboxes/{id}/files/rename": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["renameFile"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["nodeListSandboxes"];
        put?: never;
        post: operations["nodeCreateSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        delete: operations["nodeKillSandbox"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/timeout": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post: operations["nodeSetTimeout"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/snapshot-interval": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put: operations["nodeSetSnapshotInterval"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/network": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        /** @description Replaces the running sandbox's egress policy; new connections and requests are judged by it at once. The control plane then records sandbox.network_changed. */
        put: operations["nodeSetNetwork"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/approvals": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        /** @description The sandbox's requests held for approval of a secret's use, oldest first. */
        get: operations["nodeListApprovals"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/approvals/{requestId}": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                requestId: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Approves or denies a pending request of this sandbox (records secret.approval_decided); with ttlS an approval also lets the sandbox's later uses of the same secret pass for that long. A request that is not pending for this sandbox answers approval_not_found. */
        post: operations["nodeDecideApproval"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/snapshots": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Takes a snapshot of the running sandbox now (reason manual; pinned when named) and records snapshot.taken. */
        post: operations["nodeTakeSnapshot"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/metrics": {
        parameters: {
            query?: {
                start?: string;
                end?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        /** @description As GET /v1/sandboxes/{id}/metrics, for the control plane (E2B's getMetrics). */
        get: operations["nodeGetMetrics"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/envd-tokens": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description An envd access token the control plane just handed to an E2B client for this running sandbox: the gateway checks it (signature, expiry, revoked key, sandbox) and keeps it among the few that E2B's signed file URLs of this sandbox are checked against, so a URL made before the client's first envd request opens too. */
        post: operations["nodeRememberEnvdToken"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/pause": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Snapshots the running sandbox (reason pause), releases its VM, records snapshot.taken then sandbox.paused. */
        post: operations["nodePauseSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/sandboxes/{id}/resume": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Restores the paused sandbox from one of its snapshots into a new VM under the same id and records sandbox.resumed. */
        post: operations["nodeResumeSandbox"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/forks": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * @description Restores each listed sandbox (already recorded as sandbox.created by the control plane) from the snapshot.
         *     Per fork the gateway records sandbox.started then sandbox.forked, or sandbox.failed; the answer lists every
         *     requested id, in request order, as a running NodeSandbox or a NodeForkFailure.
         */
        post: operations["nodeForkSandboxes"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/snapshots/{id}": {
        parameters: {
            query: {
                tenantId: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SnapshotId"];
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** @description Deletes the tenant's snapshot (its manifest; chunks go with the next collection) and records snapshot.deleted (why user). */
        delete: operations["nodeDeleteSnapshot"];
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/maintenance": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Runs retention (thinning by the policy) and chunk garbage collection now; they also run on a timer. */
        post: operations["nodeMaintenance"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/failpoints": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description Chaos runs only (the route exists when the server runs with SANDGLASS_CHAOS=1, never otherwise): the failpoints armed now and those that fired, in order. */
        get: operations["nodeFailpoints"];
        put?: never;
        /** @description Chaos runs only (SANDGLASS_CHAOS=1): arms one failpoint of this server process, e.g. `chunkstore.write` with `enospc`, or `clock.jump` with a signed millisecond offset. It fires once, on the `@N`-th pass from now. */
        post: operations["nodeArmFailpoint"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/revoked-keys": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description API keys revoked on the control plane. Access tokens obtained with them are refused from now on, though signed and unexpired; the gateway forgets an entry once every token it could match has expired (`untilMs`). */
        post: operations["nodeRevokeKeys"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/template-pools": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The tenant template pools this node keeps, and how many warmed VMs each holds now. */
        get: operations["nodeListTemplatePools"];
        /** @description Keeps `size` VMs restored from a tenant template version's snapshot warmed on this node, bound to no sandbox, for creates from that version (a fork of `snapshotId` with the request's own network and envs). One pool per (tenant, template name): a new `snapshotId` (a new version published) drains the old pool and fills a new one; `size` 0 drains it (the template deleted, or its pool turned off). A pooled VM holds the tenant's decrypted data: it is handed only to a fork of the same snapshot stored under the same tenant (that tenant's own create, or another tenant's create from the template it published, which names it as sourceTenantId), at most once, and a revocation of the tenant's key drains every pool of the tenant. */
        put: operations["nodeSetTemplatePool"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/tenants/{tenantId}/key-revoked": {
        parameters: {
            query?: never;
            header?: never;
            path: {
                tenantId: string;
            };
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description The tenant's key was revoked on the control plane. The node stops every running sandbox of the tenant, wipes the tenant's plaintext it holds (RAM files, snapshot images cached on tmpfs, disk overlays, unwrapped keys) and refuses create, resume and fork of the tenant from now on (key_revoked). */
        post: operations["nodeTenantKeyRevoked"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/templates": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get: operations["nodeListTemplates"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/internal/v1/templates/prepare": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Makes sure the node has the template in the given VM shape before a sandbox of that shape is recorded: answers at once when it has, waits a bounded time for a build (started here, or joined) otherwise. A build that does not finish in that time goes on in the background and the answer is `template_not_ready` (retryable) with `details.phase` and `details.elapsedMs`; a shape outside `sizes` is `size_unsupported` naming the field. */
        post: operations["nodePrepareTemplate"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        Error: {
            error: {
                /** @enum {string} */
                code: "invalid_argument" | "malformed_json" | "payload_too_large" | "unauthenticated" | "permission_denied" | "not_found" | "sandbox_not_found" | "template_not_found" | "tenant_not_found" | "command_not_found" | "file_not_found" | "file_exists" | "not_a_directory" | "is_a_directory" | "path_outside_sandbox" | "sandbox_not_running" | "sandbox_paused" | "command_exited" | "capacity_exhausted" | "rate_limited" | "template_not_ready" | "template_build_in_progress" | "template_build_failed" | "size_unsupported" | "snapshot_interval_unachievable" | "vm_failed" | "agent_timeout" | "timeout" | "gateway_unavailable" | "conflict" | "snapshot_not_found" | "snapshot_corrupt" | "snapshot_out_of_range" | "snapshot_failed" | "sandbox_running" | "key_unavailable" | "key_revoked" | "storage_full" | "storage_unavailable" | "egress_denied" | "egress_secret_scope" | "egress_approval_denied" | "policy_invalid" | "secret_not_found" | "approval_not_found" | "api_key_not_found" | "api_key_revoked" | "api_key_expired" | "node_fenced" | "node_event_refused" | "node_event_invalid" | "vm_reply_refused" | "port_not_listening" | "internal";
                message: string;
                requestId?: string;
                details?: Record<string, unknown>;
            };
        };
        Envs: {
            [key: string]: string;
        };
        PtySize: {
            cols: number;
            rows: number;
        };
        StartCommand: {
            /** @description Run by /bin/bash -c (not a login shell; the agent sets PATH, HOME, USER, LANG) */
            cmd?: string;
            argv?: string[];
            cwd?: string;
            envs?: components["schemas"]["Envs"];
            user?: string;
            stdin?: boolean;
            pty?: components["schemas"]["PtySize"];
            timeoutMs?: number;
        };
        Command: {
            id: string;
            pid: number;
            argv: string[];
            cwd?: string | null;
            pty: boolean;
            /** @enum {string} */
            state: "running" | "exited";
            exitCode?: number | null;
            signal?: string | null;
            timedOut: boolean;
            outputBytes: number;
            /** Format: date-time */
            startedAt: string;
            /** Format: date-time */
            endedAt?: string | null;
        };
        Signal: {
            /** @enum {string} */
            signal: "SIGTERM" | "SIGKILL" | "SIGINT" | "SIGHUP" | "SIGQUIT" | "SIGUSR1" | "SIGUSR2";
        };
        /** @description The sandbox's samples, oldest first: one every intervalS while it runs, the last hour of them, held in the gateway's memory (a restart, a move or a resume starts a new series). The guest's own figures (the agent reads /proc/stat, /proc/meminfo and statfs of /), as E2B's are. */
        Metrics: {
            intervalS: number;
            metrics: {
                /** Format: date-time */
                timestamp: string;
                cpuCount: number;
                /** @description Of all its CPUs together, since the sample before */
                cpuUsedPct: number;
                /** @description MemTotal − MemAvailable */
                memUsedBytes: number;
                memTotalBytes: number;
                /** @description The page cache */
                memCacheBytes: number;
                /** @description Of the root filesystem */
                diskUsedBytes: number;
                diskTotalBytes: number;
            }[];
        };
        FileInfo: {
            name: string;
            path: string;
            /** @enum {string} */
            type: "file" | "dir" | "symlink" | "other";
            sizeBytes: number;
            mode: number;
            /** Format: date-time */
            mtime: string;
            symlinkTarget?: string;
        };
        NodeSandbox: {
            id: string;
            tenantId: string;
            /** @enum {string} */
            state: "starting" | "running" | "paused" | "ended" | "failed";
            pid?: number | null;
            /** Format: date-time */
            startedAt: string;
            /** Format: date-time */
            expiresAt: string;
            restoreMs?: number;
            failureReason?: string;
        };
        /** @description One committed snapshot, exactly as spec/control-plane.yaml's Snapshot (the gateway also records it as snapshot.taken). */
        Snapshot: {
            /** @description `snap_…` */
            id: string;
            /** @description The sandbox it was taken of. */
            sandboxId: string;
            /** @description The snapshot it is a delta of; null for the first of a chain. */
            parentId: string | null;
            /** Format: date-time */
            takenAt: string;
            /** @enum {string} */
            reason: "rolling" | "manual" | "pause";
            name: string | null;
            /** @description Retention never thins a pinned snapshot (a named one is always pinned). */
            pinned: boolean;
            /** @description Bytes this snapshot added to the store (new chunks plus its manifest). */
            sizeAddedBytes: number;
            memoryMib: number;
            vcpus: number;
            template: string;
            /** @description false: disk-only (a pause with keepMemory false); resuming or forking it boots the guest over its disk. */
            memory: boolean;
        };
        SnapshotReply: {
            snapshot: components["schemas"]["Snapshot"];
        };
        NodeTemplatePool: {
            tenantId: string;
            name: string;
            snapshotId?: string | null;
            size: number;
            /** @description Warmed VMs ready to hand out now. */
            available: number;
        };
        /** @description A fork that did not start; the gateway has recorded sandbox.failed for it. */
        NodeForkFailure: {
            id: string;
            error: {
                code: string;
                message: string;
                details?: Record<string, unknown>;
            };
        };
        /**
         * @description What the node does at the timeout: kill (sandbox.killed, reason timeout) or pause (sandbox.paused, reason timeout; a kill if the pause snapshot fails).
         * @default kill
         * @enum {string}
         */
        NodeOnTimeout: "kill" | "pause";
        /** @description An egress policy the control plane has checked with parsePolicy (rules in the grammar of @sandglass/egress); the gateway parses it again and refuses it with policy_invalid, failing closed. */
        NodePolicy: {
            allow: string[];
            deny: string[];
        };
        /** @description Names of the tenant's secrets to bind (each existed when the control plane checked); the gateway resolves them through the SecretStore. */
        NodeSecretNames: string[];
        /** @description What a sandbox's commands, PTYs and relative paths default to when a call names no user or directory (a call's own user and cwd win). Kept in every snapshot of the sandbox, so its resumes and forks keep them. */
        NodeSandboxDefaults: {
            user?: string;
            workdir?: string;
        };
        /** @description The fork replays its source from the snapshot: the guest's clock and entropy come from the source's recording (`sync`, absent when the recording has none), and its egress proxy answers every request from `exchanges` (the source's recorded exchanges after the snapshot, in order) and connects nowhere. Every content id must be in the source's recording. */
        NodeReplayPlan: {
            sourceSandboxId: string;
            sync?: {
                timeUnixNs: string;
                entropyContentId: components["schemas"]["ContentId"];
            };
            /** @description A replay from its source's creation: the secrets' placeholders the source was created with (its sandbox.started names them), so the fork's processes hold the same ones. */
            placeholdersContentId?: components["schemas"]["ContentId"];
            exchanges: {
                method: string;
                url: string;
                requestBody: components["schemas"]["RecordedContent"];
                status: number;
                responseHeaders: string[][];
                responseBody: components["schemas"]["RecordedContent"];
            }[];
        };
        ContentId: string;
        RecordedContent: {
            contentId: components["schemas"]["ContentId"];
            recordedBytes: number;
        };
        /** @description The sandbox's own environment variables (checked by the control plane), given at every start; merged into the agent's env.defaults under the egress variables and secret placeholders, which win. */
        NodeEnvs: {
            [key: string]: string;
        };
        /** @description A request held until its use of a secret is approved, exactly as spec/control-plane.yaml's ApprovalRequest. */
        ApprovalRequest: {
            requestId: string;
            sandboxId: string;
            secret: string;
            host: string;
            port: number;
            method: string;
            path: string;
            /** Format: date-time */
            requestedAt: string;
            /** Format: date-time */
            expiresAt: string;
        };
        /** @description The guest memory sizes and vCPU counts this node serves; a create asking for another is `size_unsupported`. */
        NodeSizes: {
            memoryMib: number[];
            vcpus: number[];
        };
        NodeTemplate: {
            name: string;
            /** @enum {string} */
            status: "ready" | "building" | "failed";
            key?: string;
            memoryMib: number;
            vcpus: number;
            error?: string;
        };
    };
    responses: {
        /** @description An error; see docs/errors.md */
        Error: {
            headers: {
                [name: string]: unknown;
            };
            content: {
                "application/json": components["schemas"]["Error"];
            };
        };
    };
    parameters: {
        SandboxId: string;
        SnapshotId: string;
        CommandId: string;
        Path: string;
    };
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    health: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The gateway is up */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        /** @enum {string} */
                        status: "ok";
                        /** @enum {string} */
                        accel?: "kvm" | "tcg";
                        sandboxes?: number;
                        /** @description Warmed restores of the base template ready to hand out */
                        warm?: number;
                    };
                };
            };
        };
    };
    listCommands: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Commands of this sandbox */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        commands: components["schemas"]["Command"][];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    startCommand: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["StartCommand"];
            };
        };
        responses: {
            /** @description Started */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Command"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    getCommand: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The command */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Command"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    streamCommand: {
        parameters: {
            query?: {
                fromOffset?: number;
                access_token?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Switching protocols */
            101: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    readCommandOutput: {
        parameters: {
            query?: {
                fromOffset?: number;
                follow?: boolean;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Output records */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": string;
                };
            };
            default: components["responses"]["Error"];
        };
    };
    sendStdin: {
        parameters: {
            query?: {
                eof?: boolean;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/octet-stream": string;
            };
        };
        responses: {
            /** @description Written */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    signalCommand: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["Signal"];
            };
        };
        responses: {
            /** @description Sent to the command's process group */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    resizeCommand: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                cid: components["parameters"]["CommandId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["PtySize"];
            };
        };
        responses: {
            /** @description Resized */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    readFile: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description File bytes, streamed (chunked); the size at open time is in a header */
            200: {
                headers: {
                    /** @description Size of the file when it was opened */
                    "x-sandglass-size-bytes"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": string;
                };
            };
            default: components["responses"]["Error"];
        };
    };
    writeFile: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
                mode?: number;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/octet-stream": string;
            };
        };
        responses: {
            /** @description Written (atomically, via a temporary file and rename) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        path: string;
                        sizeBytes: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    removeFile: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
                recursive?: boolean;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Removed */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    readDirTar: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description A tar stream (chunked) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/x-tar": string;
                };
            };
            default: components["responses"]["Error"];
        };
    };
    writeDirTar: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/x-tar": string;
            };
        };
        responses: {
            /** @description Extracted */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        path: string;
                        /** @description Archive entries extracted */
                        entries: number;
                        /** @description Bytes of file content written */
                        sizeBytes: number;
                        /** @description Bytes of the tar stream received */
                        archiveBytes: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    readRecordedContent: {
        parameters: {
            query?: {
                /** @description The size its event gives; absent for content of one chunk (a command's spec). */
                sizeBytes?: number;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                contentId: components["schemas"]["ContentId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The content's bytes */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/octet-stream": string;
                };
            };
            default: components["responses"]["Error"];
        };
    };
    statFile: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description File info */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["FileInfo"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    listFiles: {
        parameters: {
            query: {
                path: components["parameters"]["Path"];
                depth?: number;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Directory entries */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        entries: components["schemas"]["FileInfo"][];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    makeDir: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    path: string;
                };
            };
        };
        responses: {
            /** @description Created (or already there) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        created: boolean;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    getMetrics: {
        parameters: {
            query?: {
                /** @description Only samples at or after this time */
                start?: string;
                /** @description Only samples at or before this time */
                end?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The samples */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Metrics"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    listPorts: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Listening sockets and the public ports */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        ports: {
                            port: number;
                            address: string;
                            public: boolean;
                        }[];
                        publicPorts: number[];
                        /** @description The host-name form's domain: <port>-<id>.<domain> */
                        domain: string;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    setPortPublic: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                port: number;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    public: boolean;
                };
            };
        };
        responses: {
            /** @description The port's visibility now */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        port: number;
                        public: boolean;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    createPortUrl: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    port: number;
                    /** @default 600 */
                    expiresInS?: number;
                };
            };
        };
        responses: {
            /** @description The signed URL's parts; the SDK joins them with the gateway's URL */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        port: number;
                        /** @description <port>-<id>.<domain> */
                        host: string;
                        /** @description The path form, with the token: /v1/sandboxes/{id}/ports/{port}/?sandglass_url_token=… */
                        path: string;
                        token: string;
                        /** Format: date-time */
                        expiresAt: string;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    renameFile: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    from: string;
                    to: string;
                };
            };
        };
        responses: {
            /** @description Renamed */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeListSandboxes: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Sandboxes on this node */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sandboxes: components["schemas"]["NodeSandbox"][];
                    };
                };
            };
        };
    };
    nodeCreateSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    id: string;
                    tenantId: string;
                    template: string;
                    memoryMib: number;
                    vcpus: number;
                    timeoutS: number;
                    /**
                     * @description Seconds between rolling snapshots.
                     * @default 60
                     */
                    snapshotIntervalS?: number;
                    /** @description Absent: the sandbox has no network at all. */
                    network?: components["schemas"]["NodePolicy"];
                    secrets?: components["schemas"]["NodeSecretNames"];
                    envs?: components["schemas"]["NodeEnvs"];
                    /** @description The root disk is grown to at least this many MiB before the answer; absent: the template's size. */
                    diskMib?: number;
                    onTimeout?: components["schemas"]["NodeOnTimeout"];
                    /** @description false: the pause at the timeout keeps the disk alone (keepMemory false); absent: true. */
                    onTimeoutKeepMemory?: boolean;
                    /** @description The new sandbox replays its source from the source's creation: created like it (the request repeats what the source was created with), then clock, entropy, placeholders and egress answers from the source's recording, as a fork's replay from a snapshot. */
                    replay?: components["schemas"]["NodeReplayPlan"];
                };
            };
        };
        responses: {
            /** @description Restored and running */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["NodeSandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeKillSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Stopped and its resources freed */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSetTimeout: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    /** Format: date-time */
                    expiresAt: string;
                };
            };
        };
        responses: {
            /** @description Deadline moved */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSetSnapshotInterval: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    snapshotIntervalS: number;
                    /** @description Set: taken even when this node cannot keep it (else snapshot_interval_unachievable). */
                    bestEffort?: boolean;
                };
            };
        };
        responses: {
            /** @description The next rolling snapshot follows this interval */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSetNetwork: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["NodePolicy"];
            };
        };
        responses: {
            /** @description In force */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeListApprovals: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Pending requests */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        approvals: components["schemas"]["ApprovalRequest"][];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeDecideApproval: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
                requestId: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    /** @enum {string} */
                    decision: "approve" | "deny";
                    ttlS?: number;
                };
            };
        };
        responses: {
            /** @description Decided */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeTakeSnapshot: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    name?: string;
                    /** @description First drop the guest's page cache and zero its freed memory, as a template's snapshot is prepared. */
                    compact?: boolean;
                };
            };
        };
        responses: {
            /** @description Committed */
            201: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SnapshotReply"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeGetMetrics: {
        parameters: {
            query?: {
                start?: string;
                end?: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The samples */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Metrics"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeRememberEnvdToken: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    token: string;
                };
            };
        };
        responses: {
            /** @description Kept */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodePauseSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    /**
                     * @description false: a disk-only snapshot (the guest syncs, its disk is kept, its memory discarded); the resume boots the guest over that disk.
                     * @default true
                     */
                    keepMemory?: boolean;
                };
            };
        };
        responses: {
            /** @description Paused */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["SnapshotReply"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeResumeSandbox: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                id: components["parameters"]["SandboxId"];
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    snapshotId: string;
                    tenantId: string;
                    timeoutS: number;
                    /**
                     * @description Seconds between rolling snapshots.
                     * @default 60
                     */
                    snapshotIntervalS?: number;
                    /** @description The policy in force when it was paused; absent: no network. */
                    network?: components["schemas"]["NodePolicy"];
                    secrets?: components["schemas"]["NodeSecretNames"];
                    envs?: components["schemas"]["NodeEnvs"];
                    /** @description The guest ports that were public when it stopped (from its port.visibility events); they are public again once it runs. */
                    publicPorts?: number[];
                    onTimeout?: components["schemas"]["NodeOnTimeout"];
                    /** @description false: the pause at the timeout keeps the disk alone (keepMemory false); absent: true. */
                    onTimeoutKeepMemory?: boolean;
                    /** @description true: boot the guest over the snapshot's disk, its memory left unused (as a disk-only snapshot always is). */
                    coldBoot?: boolean;
                };
            };
        };
        responses: {
            /** @description Restored and running */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["NodeSandbox"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeForkSandboxes: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    snapshotId: string;
                    tenantId: string;
                    /** @description A create from a template another tenant published for every tenant: the tenant whose key the snapshot is stored under (read with it), while the forks are tenantId's and every snapshot of theirs is stored under tenantId's key alone (their first capture stores everything, nothing refers to the source's chunks). Only with network (a create from a template), never with replay. */
                    sourceTenantId?: string;
                    /** @description The source sandbox's environment variables, which every fork inherits. */
                    envs?: components["schemas"]["NodeEnvs"];
                    /** @description A sandbox created from a tenant template: its own policy, in force before its guest runs, instead of the snapshot's (the build's). */
                    network?: components["schemas"]["NodePolicy"];
                    /** @description With network: the new sandbox's secrets (the build's are not carried over). */
                    secrets?: components["schemas"]["NodeSecretNames"];
                    /** @description A sandbox created from a tenant template: the template's user and workdir, instead of the snapshot's. */
                    defaults?: components["schemas"]["NodeSandboxDefaults"];
                    replay?: components["schemas"]["NodeReplayPlan"];
                    sandboxes: {
                        id: string;
                        timeoutS: number;
                        snapshotIntervalS: number;
                        onTimeout?: components["schemas"]["NodeOnTimeout"];
                        /** @description false: the pause at the timeout keeps the disk alone (keepMemory false); absent: true. */
                        onTimeoutKeepMemory?: boolean;
                    }[];
                };
            };
        };
        responses: {
            /** @description One entry per requested fork */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sandboxes: (components["schemas"]["NodeSandbox"] | components["schemas"]["NodeForkFailure"])[];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeDeleteSnapshot: {
        parameters: {
            query: {
                tenantId: string;
            };
            header?: never;
            path: {
                id: components["parameters"]["SnapshotId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Deleted */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeMaintenance: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: {
            content: {
                "application/json": {
                    /** @description Unreferenced chunks younger than this survive (default 15 min). */
                    gcGraceMs?: number;
                };
            };
        };
        responses: {
            /** @description What was thinned and collected */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        /** @description Snapshots retention thinned. */
                        deleted: number;
                        /** @description The chunk store's mark-and-sweep. */
                        gc: {
                            manifests: number;
                            liveChunks: number;
                            deletedChunks: number;
                            /** @description Chunk writes a failed capture staged and never published */
                            abandonedWrites: number;
                            freedBytes: number;
                            /** @description Unreferenced chunks younger than the grace period */
                            keptYoung: number;
                            /** @description Tenants whose manifests could not all be read; none of their chunks were considered. */
                            undecidedTenants: string[];
                            durationMs: number;
                        };
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeFailpoints: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Armed and fired failpoints */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        armed: string[];
                        fired: {
                            name: string;
                            action: string;
                            atMs: number;
                        }[];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeArmFailpoint: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    name: string;
                    spec: string;
                };
            };
        };
        responses: {
            /** @description Armed */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeRevokeKeys: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    keyIds: string[];
                    /** @description When the last token such a key obtained expires (unix ms). */
                    untilMs: number;
                };
            };
        };
        responses: {
            /** @description Recorded */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
    nodeListTemplatePools: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The pools. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        pools: components["schemas"]["NodeTemplatePool"][];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSetTemplatePool: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    tenantId: string;
                    name: string;
                    /** @description Required when size is above 0. */
                    snapshotId?: string;
                    size: number;
                };
            };
        };
        responses: {
            /** @description The pool as it is now (filling runs on after the answer). */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["NodeTemplatePool"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeTenantKeyRevoked: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                tenantId: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description What the node stopped and wiped. */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        stoppedSandboxes: string[];
                        wipedFiles: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeListTemplates: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Templates this node can restore */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        templates: components["schemas"]["NodeTemplate"][];
                        sizes: components["schemas"]["NodeSizes"];
                    };
                };
            };
        };
    };
    nodePrepareTemplate: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    template: string;
                    memoryMib: number;
                    vcpus: number;
                    /** @description The interval the sandbox will ask for: `snapshot_interval_unachievable` when this node has measured that one snapshot of this memory size takes longer, unless bestEffort. */
                    snapshotIntervalS?: number;
                    bestEffort?: boolean;
                };
            };
        };
        responses: {
            /** @description The template of that shape is ready on this node */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        key: string;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
}
