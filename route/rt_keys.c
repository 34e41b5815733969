/*
 * rt_keys.c - the route language's key table (rt_keys.h): what the
 * compilers in rt_route.c, rt_http.c and rt_emit.c accept, and the
 * reference docs/routes.md shows.
 *
 * thread: main (config load, --route-reference).
 */
#include <string.h>

#include "rt_keys.h"

#define SQL RT_KIND_SQL
#define HTTP RT_KIND_HTTP
#define ACTION RT_KIND_ACTION
#define ANY (SQL | HTTP | ACTION)

static const rt_key_t keys[] = {
    {RT_SCOPE_ROUTE, "match", "`\"*\"` or object", "(required)", ANY, 0, 0, 0,
     "which messages the route takes: `\"*\"` every one, or an object of `subject` and/or "
     "`property`; the first route that matches wins"},
    {RT_SCOPE_ROUTE, "sql", "string or array", "(required for a SQL route)", SQL | HTTP, 0, 0, 0,
     "statement(s) run in the inbox transaction (in an HTTP route: in the finishing "
     "transaction); never `BEGIN`, `COMMIT` or another transaction statement"},
    {RT_SCOPE_ROUTE, "params", "array", "none", SQL | HTTP, 0, 0, 0,
     "one source per `?` (one array per statement when `sql` is an array): `message_id`, "
     "`body`, a message field, `prop:NAME`, a `$.path`, a literal or `{\"const\": ...}`; in an "
     "HTTP route also `response:$.path`, `response:status`, `response:header:NAME`"},
    {RT_SCOPE_ROUTE, "idempotency_key", "template", "the message id", SQL | HTTP, 0, 0, 0,
     "the inbox key: a template over the sources in braces (`order:{$.orderId}`); never "
     "`{delivery_count}`, `{sequence_number}`, `{enqueued_at}` or constants alone"},
    {RT_SCOPE_ROUTE, "payload_hash", "`body` or `params`", "`body`", SQL | HTTP, 0, 0, 0,
     "what a copy under a known key is compared by: the whole body, or (SQL routes with "
     "`params`) the bound parameter values, so a re-send with fields the route does not apply "
     "is a duplicate"},
    {RT_SCOPE_ROUTE, "on_permanent", "`deadletter` or `record`", "`deadletter`", SQL, 0, 0, 0,
     "a permanent failure dead-letters the message, or records it as a `failed` row and "
     "completes it"},
    {RT_SCOPE_ROUTE, "on_unique_violation", "`duplicate` or `permanent`", "`permanent`",
     SQL | HTTP, 0, 0, 0,
     "a unique violation in the route's statements completes the message as a duplicate "
     "(the business-key backstop) instead of dead-lettering it"},
    {RT_SCOPE_ROUTE, "constraints", "array of names", "any", SQL | HTTP, 0, 0, 0,
     "with `on_unique_violation`: only these constraints count; each must exist at start"},
    {RT_SCOPE_ROUTE, "http", "object", "none", HTTP, 0, 0, 0,
     "an HTTP call as the effect (its keys below); `sql` then runs when it finishes"},
    {RT_SCOPE_ROUTE, "emit", "array", "none", SQL | HTTP, 0, 0, 0,
     "messages to publish, written to the outbox in the route's transaction (keys below)"},
    {RT_SCOPE_ROUTE, "emit_on_failure", "array", "none", SQL | HTTP, 0, 0, 0,
     "rejection events, written in the transaction that records a permanent failure"},
    {RT_SCOPE_ROUTE, "action", "`deadletter` or `complete`", "none", ACTION, 0, 0, 0,
     "settle without applying: dead-letter with `reason`, or complete"},
    {RT_SCOPE_ROUTE, "reason", "string", "(required with `deadletter`)", ACTION, 0, 0, 0,
     "the dead-letter reason of `action: deadletter`"},

    {RT_SCOPE_ROUTE, "claim_check", "object", "none", SQL | HTTP, 0, 0, 0,
     "the body is a blob in Azure Blob Storage that the message points at (keys below): "
     "fetched before the route runs, then bound from exactly as a body"},

    {RT_SCOPE_MATCH, "subject", "string", "any", ANY, 0, 0, 0, "the message's subject, exactly"},
    {RT_SCOPE_MATCH, "property", "object", "any", ANY, 0, 0, 0,
     "application properties, name: string, integer or boolean, all equal"},

    {RT_SCOPE_HTTP, "url", "template", "(required)", HTTP, 0, 0, 0,
     "`https://` or `http://` template; `{...}` takes the key's sources plus `{key}` (the "
     "idempotency key, or the message id when the route has none), percent-encoded (but for a "
     "host the message chooses, see `allowed_hosts`); the scheme, host and port are written "
     "out, templates only in the path and query, so a message never chooses where the route's "
     "headers (its secret) go"},
    {RT_SCOPE_HTTP, "method", "string", "`POST`", HTTP, 0, 0, 0,
     "`GET`, `POST`, `PUT`, `PATCH` or `DELETE`"},
    {RT_SCOPE_HTTP, "body", "source", "none", HTTP, 0, 0, 0,
     "`body` (the message body as is), a `$.path` (that value serialised), a message field or "
     "`{\"const\": ...}`"},
    {RT_SCOPE_HTTP, "headers", "object", "none", HTTP, 0, 0, 0,
     "name: template, or `{\"env\": NAME}`, a secret read from the environment at start and "
     "masked wherever it would appear"},
    {RT_SCOPE_HTTP, "idempotency_header", "string", "none", HTTP, 0, 0, 0,
     "the header that carries the key on every attempt"},
    {RT_SCOPE_HTTP, "idempotent", "boolean", "`false`", HTTP, 0, 0, 0,
     "`true` when the destination honours the key (needs `idempotency_header`): an "
     "ambiguous call is then made again"},
    {RT_SCOPE_HTTP, "timeout_ms", "integer", "`10000`", HTTP, 100, 600000, 10000,
     "the whole exchange"},
    {RT_SCOPE_HTTP, "lease_s", "integer", "`60`", HTTP, 1, 86400, 60,
     "the claim's lease; longer than `timeout_ms`, shorter than "
     "`servicebus.max_auto_lock_renewal_s` (`--check-config` says so)"},
    {RT_SCOPE_HTTP, "remote_id", "`$.path`", "none", HTTP, 0, 0, 0,
     "a JSON path into the answer, stored on the row"},
    {RT_SCOPE_HTTP, "reconcile", "object", "none", HTTP, 0, 0, 0,
     "asked after an ambiguous call when the destination is not idempotent (keys below)"},
    {RT_SCOPE_HTTP, "ca_file", "path", "system store", HTTP, 0, 0, 0,
     "PEM bundle that verifies the destination (TLS is always verified)"},
    {RT_SCOPE_HTTP, "allowed_hosts", "array", "none", HTTP, 0, 0, 0,
     "`[\"host\", \"host:port\"]`: with it, `url` and `reconcile.url` may template the host "
     "(`http://{$.host}/c`, `http://{$.host}:{$.port}/c`); a bound value is written as is when "
     "it is a host name, an IP literal or a port, with an optional `:port`, anything else "
     "refused; a `host:port` entry allows that port only, a bare `host` the scheme's default "
     "port; a bound host not listed is refused before any call (dead-lettered `BindError`)"},
    {RT_SCOPE_HTTP, "rate_per_s", "number", "unlimited", HTTP, 0, 0, 0,
     "calls per second to the destination (scheme, host and port), a token bucket with a "
     "second's burst; per process unless `limit_scope` is `cluster`"},
    {RT_SCOPE_HTTP, "max_concurrent", "integer", "unlimited", HTTP, 1, 1024, 0,
     "calls under way at once to the destination; per process unless `limit_scope` is "
     "`cluster`"},
    {RT_SCOPE_HTTP, "limit_scope", "string", "`process`", HTTP, 0, 0, 0,
     "`process`: `rate_per_s` and `max_concurrent` hold in each process (N replicas call at up "
     "to N times them); `cluster`: they hold for all the consumer's replicas together, divided "
     "between the replicas alive in `db.replicas_table` (`rate_per_s` by the messages each "
     "holds, `max_concurrent` by count, re-read every 2 s)"},
    {RT_SCOPE_HTTP, "max_retry_after_s", "integer", "`300`", HTTP, 1, 86400, 300,
     "the longest `Retry-After` (seconds or an HTTP date) held: a longer one holds the "
     "destination only that long, counted in `inboxd_http_retry_after_capped_total`"},
    {RT_SCOPE_HTTP, "applied_statuses", "array of statuses", "none", HTTP, 0, 0, 0,
     "statuses that mean already done, e.g. `[409]` from a destination that refuses a second "
     "charge: treated as applied (row `processed`, route SQL on that answer)"},

    {RT_SCOPE_RECONCILE, "url", "template", "(required)", HTTP, 0, 0, 0,
     "the lookup, a template like `http.url`"},
    {RT_SCOPE_RECONCILE, "method", "string", "`GET`", HTTP, 0, 0, 0,
     "`GET`, `POST`, `PUT`, `PATCH` or `DELETE`"},
    {RT_SCOPE_RECONCILE, "found", "`$.path`", "none", HTTP, 0, 0, 0,
     "must be present and non-empty in a 2xx answer for it to mean applied (a search "
     "answering `[]` means not found)"},

    {RT_SCOPE_EMIT, "entity", "string", "(required)", SQL | HTTP, 0, 0, 0,
     "the queue or topic to publish to"},
    {RT_SCOPE_EMIT, "message_id", "template", "(required)", SQL | HTTP, 0, 0, 0,
     "deterministic: the same in every copy of the incoming message"},
    {RT_SCOPE_EMIT, "subject", "template", "none", SQL | HTTP, 0, 0, 0, "the subject"},
    {RT_SCOPE_EMIT, "session_id", "template", "none", SQL | HTTP, 0, 0, 0,
     "the session (rows of one session leave in order)"},
    {RT_SCOPE_EMIT, "correlation_id", "template", "the incoming message id", SQL | HTTP, 0, 0,
     0, "the correlation id"},
    {RT_SCOPE_EMIT, "content_type", "template", "`application/json` for a `$.path` body",
     SQL | HTTP, 0, 0, 0, "the content type"},
    {RT_SCOPE_EMIT, "body", "source", "the incoming body", SQL | HTTP, 0, 0, 0,
     "a source; a `$.path` gives that value's JSON"},
    {RT_SCOPE_EMIT, "properties", "object", "none", SQL | HTTP, 0, 0, 0,
     "application properties, name: source"},
    {RT_SCOPE_EMIT, "created_at", "boolean", "`false`", SQL | HTTP, 0, 0, 0,
     "adds `created-at`, when the outbox row was written"},
    {RT_SCOPE_EMIT, "schema_version", "string", "none", SQL | HTTP, 0, 0, 0,
     "adds `schema-version`, 1 to 64 characters"},

    {RT_SCOPE_CLAIM, "url", "template", "(required)", SQL | HTTP, 0, 0, 0,
     "the blob's URL, e.g. `{$.data.url}` (an Event Grid `Microsoft.Storage.BlobCreated` "
     "event) or `{prop:blob-url}`; rendered as the message gives it (a SAS in its query is "
     "kept), never percent-encoded; `http://` or `https://` on a host of `allowed_hosts`, else "
     "dead-lettered `BindError` before any request"},
    {RT_SCOPE_CLAIM, "allowed_hosts", "array", "(required)", SQL | HTTP, 0, 0, 0,
     "`[\"acct.blob.core.windows.net\", \"127.0.0.1:10000\"]`: the only hosts fetched (a "
     "message never chooses where inboxd's credentials go); a `host:port` entry allows that "
     "port only, a bare `host` the scheme's default port"},
    {RT_SCOPE_CLAIM, "max_bytes", "integer", "`16777216`", SQL | HTTP, 1, 1073741824, 16777216,
     "the largest blob fetched: a larger `Content-Length` is refused before the body is read, "
     "a body that runs past it while read is cut off; dead-lettered `ClaimCheckTooLarge`"},
    {RT_SCOPE_CLAIM, "sha256", "template", "none", SQL | HTTP, 0, 0, 0,
     "the blob's SHA-256 as the message carries it (64 hex digits); when its source is present "
     "the fetched bytes must hash to it, else `ClaimCheckChanged`"},
    {RT_SCOPE_CLAIM, "etag", "template", "none", SQL | HTTP, 0, 0, 0,
     "the blob's ETag as the message carries it (`{$.data.eTag}`; quotes ignored); when present "
     "the answer's `ETag` must equal it, else `ClaimCheckChanged`"},
    {RT_SCOPE_CLAIM, "auth", "`sas`, `shared_key` or `workload_identity`", "`sas`", SQL | HTTP, 0,
     0, 0,
     "`sas`: the URL as given (its SAS, or a public container); `shared_key`: each request "
     "signed with `account_key` (`Authorization: SharedKey`); `workload_identity`: a bearer "
     "token for `https://storage.azure.com/` from the pod's federated identity (as "
     "`servicebus.auth`)"},
    {RT_SCOPE_CLAIM, "account", "string", "(required with `shared_key`)", SQL | HTTP, 0, 0, 0,
     "the storage account's name"},
    {RT_SCOPE_CLAIM, "account_key", "`{\"env\": NAME}`", "(required with `shared_key`)",
     SQL | HTTP, 0, 0, 0,
     "the account key (base64), read from the environment at start and masked in logs"},
    {RT_SCOPE_CLAIM, "timeout_ms", "integer", "`30000`", SQL | HTTP, 100, 600000, 30000,
     "the whole fetch, connect included; a timeout is a storage outage (held)"},
    {RT_SCOPE_CLAIM, "ca_file", "path", "system store", SQL | HTTP, 0, 0, 0,
     "PEM bundle that verifies the storage endpoint (TLS is always verified)"},
};

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

const rt_key_t *rt_key_find(rt_scope_t scope, const char *key)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (keys[i].scope == scope && strcmp(keys[i].key, key) == 0)
            return &keys[i];
    return NULL;
}

void rt_keys_check(const json_t *o, rt_scope_t scope, const char *field, ib_problems_t *p)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        if (rt_key_find(scope, k))
            continue;
        if (*field) {
            char f[128];
            snprintf(f, sizeof(f), "%s.%s", field, k);
            ib_problem(p, f, "unknown key");
        } else {
            ib_problem(p, k, "unknown key");
        }
    }
}

long rt_key_int(const json_t *o, rt_scope_t scope, const char *key, const char *field,
                ib_problems_t *p)
{
    const rt_key_t *d = rt_key_find(scope, key);
    json_t *v = json_object_get(o, key);
    if (!v)
        return d->dflt;
    if (!json_is_integer(v) || json_integer_value(v) < d->min || json_integer_value(v) > d->max) {
        ib_problem(p, field, "must be an integer from %ld to %ld", d->min, d->max);
        return d->dflt;
    }
    return (long)json_integer_value(v);
}

static const char *kinds_text(int kinds)
{
    switch (kinds) {
    case SQL: return "SQL";
    case HTTP: return "HTTP";
    case ACTION: return "action";
    case SQL | HTTP: return "SQL, HTTP";
    case ANY: return "every";
    default: return "?";
    }
}

static void print_scope(FILE *fp, rt_scope_t scope, const char *title, bool with_kinds)
{
    fprintf(fp, "%s\n\n", title);
    fprintf(fp, with_kinds ? "| key | type | default | routes | meaning |\n|---|---|---|---|---|\n"
                           : "| key | type | default | meaning |\n|---|---|---|---|\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const rt_key_t *k = &keys[i];
        char range[64] = "";
        if (k->scope != scope)
            continue;
        if (k->min < k->max)
            snprintf(range, sizeof(range), " (%ld to %ld)", k->min, k->max);
        fprintf(fp, "| `%s` | %s%s | %s |", k->key, k->type, range, k->def);
        if (with_kinds)
            fprintf(fp, " %s |", kinds_text(k->kinds));
        fprintf(fp, " %s |\n", k->doc);
    }
}

void rt_keys_print_markdown(FILE *fp)
{
    print_scope(fp, RT_SCOPE_ROUTE, "A route (`routes[i]`):", true);
    print_scope(fp, RT_SCOPE_MATCH, "\n`match`, when an object (both given: both must hold):",
                false);
    print_scope(fp, RT_SCOPE_HTTP, "\n`http` (HTTP routes):", false);
    print_scope(fp, RT_SCOPE_RECONCILE, "\n`http.reconcile`:", false);
    print_scope(fp, RT_SCOPE_EMIT, "\nAn entry of `emit` or `emit_on_failure`:", false);
    print_scope(fp, RT_SCOPE_CLAIM, "\n`claim_check` (the body from a blob, see Claim check):",
                false);
}
