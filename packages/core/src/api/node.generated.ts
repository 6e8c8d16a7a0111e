// GENERATED from spec/node.yaml by scripts/gen.ts (openapi-typescript). Do not edit by hand: run `npm run gen`.

export interface paths {
    "/node/v1/enrol": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Spends a one-time enrolment token the operator issued for this node id and binds a new key to the id, with the node's transport public key; an earlier key of the id stops working. The only node API call without a bearer. `unauthenticated` for a token that is unknown, used, expired or issued for another id. */
        post: operations["nodeEnrol"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/heartbeat": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Registers the node (epoch null) or renews its membership; placement reads capacity and templates from it. */
        post: operations["nodeHeartbeat"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description A batch of the gateway's events, in the order they happened, from its durable outbox. Idempotent by event id: a batch delivered twice is appended once. Each event is checked against spec/events.yaml: a type it does not list, or data that does not fit that type's schema exactly (a missing or extra field, a wrong type, a value out of bounds), is dropped with code node_event_invalid; a type only the control plane records (node: false), or one about the wrong scope of tenant, with node_event_refused. Then it is bound to what the node runs: about no sandbox only gc.completed (system tenant) and a revoked tenant's tenant.plaintext_wiped; about a sandbox only one of the event's tenant placed on this node, and one naming a snapshot of it (snapshot.*, sandbox.paused, sandbox.resumed) only for that sandbox's snapshot; else node_event_refused. Each drop names the offending field as a JSON pointer into the event; the node's outbox moves past it and never sends it again. */
        post: operations["nodeAppendEvents"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/tenants/{tenantId}/data-keys/{purpose}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description The tenant's key for one purpose and data key version, sealed for this node with `<node>/<tenant>/<purpose>/v<version>` as associated data. Only for a tenant with a sandbox placed on the node (or the template tenant); the node keeps it in memory only. `key_revoked` once the tenant's key is revoked (here or on its HSM), `key_unavailable` while its provider cannot answer. */
        post: operations["nodeDataKey"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/tenants/{tenantId}/key": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description The tenant's data key version for new writes; with `verify=true` its key provider is asked first, past every cache (an HSM round trip): what a node asks before every boot (create, resume, fork, a failover move) and on its poll. `key_revoked` or `key_unavailable` when the key cannot be used now. Only for a tenant with a sandbox placed on the node. */
        get: operations["nodeTenantKey"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/tenants/{tenantId}/secrets/{name}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description A secret's rules (never its value), when a sandbox of the tenant placed on this node binds it. */
        get: operations["nodeSecretInfo"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/tenants/{tenantId}/secrets/{name}/value": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description The secret's value, sealed for this node, at the moment a request uses it: only while a sandbox of the tenant placed on this node binds the secret. Never cached by the node beyond the request. */
        post: operations["nodeSecretValue"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/templates/{key}": {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                key: string;
            };
            cookie?: never;
        };
        /** @description The snapshot in the chunk store that holds the template with this key. */
        get: operations["nodeTemplateLookup"];
        /** @description Publishes the node's build of a template; the first publisher wins and every caller gets the winner. */
        put: operations["nodeTemplatePublish"];
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/sandboxes/{sandboxId}/location": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** @description Where a sandbox runs now: its node and that node's advertised data-plane URL, so a gateway can forward an E2B envd request for a sandbox it does not run. `sandbox_not_found` when it is not running on an alive node. A gateway asks only after it verified the request's access token for that sandbox. */
        get: operations["nodeSandboxLocation"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/sandboxes/{sandboxId}/wake": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description A request reached this node for a sandbox it does not run, carrying a credential the node verified for that sandbox: the node passes the credential on as it received it (an access token `sgat_…`, or a signed port URL's token `sgpu_…`, also as its cookie), and the control plane verifies it again itself — signature and expiry, the sandbox (and tenant) it names, the API key behind it in the database (of the sandbox's tenant, not revoked, not expired) — so naming a sandbox id opens nothing. A paused sandbox created with `autoResume` is then resumed through the ordinary resume (placement keeps its last node while that is alive; one resume however many requests ask at once); the answer is the node it runs on now, which may be another one. `sandbox_paused` when it is paused without `autoResume` (it stays paused); `sandbox_not_found` when it is not running nor paused (unknown, ended, failed); `unauthenticated`, `permission_denied`, `api_key_revoked` or `api_key_expired` when the credential does not hold, and the resume's own error when that fails. */
        post: operations["nodeSandboxWake"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/capture-leases": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** @description Takes the lease of one capture, held by the calling node until released or `ttlMs` after this call. Refused with `conflict` while a GC sweep holds the gate (retry after a wait: a sweep takes minutes at most). The node must not commit the capture's manifest once the lease may have expired (`ttlMs` after it sent this request). */
        post: operations["nodeCaptureLeaseTake"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/node/v1/capture-leases/{snapshotId}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        post?: never;
        /** @description Releases the calling node's lease of the capture (committed or failed); releasing one not held is a no-op. */
        delete: operations["nodeCaptureLeaseRelease"];
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
                code: string;
                message: string;
                requestId?: string;
                details?: Record<string, unknown>;
            };
        };
        /** @description Chosen by the operator (`--node-id`); stable across restarts of the same host. */
        NodeId: string;
        /** @description Base64 of a seal to the node's public key (ephemeral X25519 SPKI DER, then a kms seal). */
        Sealed: string;
        Heartbeat: {
            /** @description null to register (at start, and after being fenced); else the epoch the last reply gave. */
            epoch: number | null;
            /** @description Base URL of the node's data plane, which clients are handed. */
            url: string;
            /** @description Base URL (http:// or https://) of its internal API, for the control plane only. */
            internalUrl: string;
            /** @description Guest memory the node admits in all. */
            capacityMemoryMib: number;
            freeMemoryMib: number;
            /** @description Snapshots a minute the node can sustain: its capture slots over the mean duration of its latest captures; null (or absent, from an older gateway) until it has taken one. Placement prefers a node whose sandboxes' asked-for snapshots, the new one's included, fit in it. */
            captureCapacityPerMin?: number | null;
            /** @description Ids of the sandboxes whose VMs run on the node now. */
            sandboxes: string[];
            /** @description Keys of the templates the node has cached. */
            templates: string[];
        };
        HeartbeatReply: {
            epoch: number;
            heartbeatIntervalS: number;
            deadAfterS: number;
            /** @description Sandboxes of the heartbeat that are not placed on this node (moved, ended); stop them without a snapshot. */
            stop: string[];
            /** @description On registration, the API keys revoked while their access tokens may still live. */
            revokedKeys: {
                keyIds: string[];
                untilMs: number;
            };
        };
        NodeEvent: {
            /** @description Given by the gateway; a retried delivery is recognised by it. */
            id: string;
            type: string;
            tenantId: string;
            sandboxId?: string;
            /** Format: date-time */
            at: string;
            data: Record<string, unknown>;
        };
        TemplateRecord: {
            tenantId: string;
            snapshotId: string;
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
        NodeId: components["schemas"]["NodeId"];
        TenantId: string;
    };
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    nodeEnrol: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    token: string;
                    /** @description Base64 of the node's X25519 public key (SPKI DER). */
                    publicKey: string;
                };
            };
        };
        responses: {
            /** @description The node's key, shown this once */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        nodeId: string;
                        nodeKey: string;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeHeartbeat: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["Heartbeat"];
            };
        };
        responses: {
            /** @description Membership renewed */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["HeartbeatReply"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeAppendEvents: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    events: components["schemas"]["NodeEvent"][];
                };
            };
        };
        responses: {
            /** @description Every event is now in the log, or was dropped for the reason given */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        appended: number;
                        duplicates: number;
                        dropped: {
                            id: string;
                            /**
                             * @description Stable. node_event_invalid, the event does not fit spec/events.yaml; node_event_refused, it is not this node's to send.
                             * @enum {string}
                             */
                            code: "node_event_invalid" | "node_event_refused";
                            /** @description The JSON pointer of the part of the event at fault: /type, /tenantId, /sandboxId, /data/snapshotId… */
                            field: string;
                            reason: string;
                        }[];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeDataKey: {
        parameters: {
            query?: {
                /** @description The data key version (a rotation makes a new one); absent, the version new writes use. `chunk-id` is always version 1. */
                version?: number;
            };
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                tenantId: components["parameters"]["TenantId"];
                purpose: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The key, sealed */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sealed: components["schemas"]["Sealed"];
                        /** @description The data key version the key belongs to. */
                        version: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeTenantKey: {
        parameters: {
            query?: {
                verify?: boolean;
            };
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                tenantId: components["parameters"]["TenantId"];
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The key is usable */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        currentVersion: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSecretInfo: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                tenantId: components["parameters"]["TenantId"];
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The rules */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        name: string;
                        hosts: string[];
                        header: string | null;
                        format: string | null;
                        bodyContentTypes: string[];
                        /** @enum {string} */
                        approval: "none" | "required";
                        allowPlaintext: boolean;
                        allowUpgrade: boolean;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSecretValue: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                tenantId: components["parameters"]["TenantId"];
                name: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The value, sealed */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        sealed: components["schemas"]["Sealed"];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeTemplateLookup: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                key: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Published */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateRecord"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeTemplatePublish: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                key: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["TemplateRecord"];
            };
        };
        responses: {
            /** @description The template's snapshot (the caller's, or an earlier publisher's) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["TemplateRecord"];
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSandboxLocation: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                sandboxId: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The node that runs it */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        gatewayId: components["schemas"]["NodeId"];
                        /** @description The node's advertised data-plane base URL (its heartbeat's url). */
                        dataPlaneUrl: string;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeSandboxWake: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                sandboxId: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    credential: string;
                };
            };
        };
        responses: {
            /** @description It runs (resumed for this request, or already running) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        gatewayId: components["schemas"]["NodeId"];
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeCaptureLeaseTake: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": {
                    snapshotId: string;
                };
            };
        };
        responses: {
            /** @description The lease is held */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": {
                        /** Format: date-time */
                        expiresAt: string;
                        ttlMs: number;
                    };
                };
            };
            default: components["responses"]["Error"];
        };
    };
    nodeCaptureLeaseRelease: {
        parameters: {
            query?: never;
            header: {
                "x-sandglass-node": components["parameters"]["NodeId"];
            };
            path: {
                snapshotId: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Released */
            204: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            default: components["responses"]["Error"];
        };
    };
}
