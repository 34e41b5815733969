#include "sb_connstr.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CONNSTR_MAX 8192

static char *trim(char *s)
{
    char *e;
    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

/* Sets *slot to a copy of v; a second value for the same key is an error. */
static ib_err_t take(char **slot, const char *key, const char *v, ib_error_t *err)
{
    if (*slot)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: %s given more than once", key);
    *slot = strdup(v);
    if (!*slot)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    return IB_E_OK;
}

/* Splits "sb://host[:port][/...]" into host and port. */
static ib_err_t parse_endpoint(const char *v, sb_connstr_t *out, ib_error_t *err)
{
    const char *p = v, *host, *end;
    size_t hl;

    if (strncasecmp(p, "sb://", 5) == 0)
        p += 5;
    else if (strncasecmp(p, "amqps://", 8) == 0)
        p += 8;
    else if (strncasecmp(p, "amqp://", 7) == 0)
        p += 7;
    else
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: Endpoint must start with sb://");
    host = p;
    end = host + strcspn(host, ":/");
    hl = (size_t)(end - host);
    if (hl == 0 || hl > 253)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: Endpoint has no host name");
    for (const char *c = host; c < end; c++)
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '.' && *c != '_')
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "connection string: Endpoint host has an invalid character");
    if (*end == ':') {
        char *stop;
        long port = strtol(end + 1, &stop, 10);
        if (stop == end + 1 || (*stop != '\0' && *stop != '/') || port < 1 || port > 65535)
            return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                                "connection string: Endpoint port must be 1..65535");
        out->port = (int)port;
        out->port_given = true;
        end = stop;
    }
    if (*end != '\0' && strcmp(end, "/") != 0)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: Endpoint must not carry a path");
    out->host = strndup(host, hl);
    if (!out->host)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    return IB_E_OK;
}

/* A key of two values: *on is true for yes, false for no, else an error naming the key. */
static ib_err_t switch_value(const char *val, const char *key, const char *yes, const char *no,
                             bool *on, ib_error_t *err)
{
    *on = strcasecmp(val, yes) == 0;
    if (*on || strcasecmp(val, no) == 0)
        return IB_E_OK;
    return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                        "connection string: %s must be %s or %s", key, yes, no);
}

/* A SAS token or a whole key pair, or no credential at all (Azure AD supplies tokens). */
static ib_err_t check_credentials(const sb_connstr_t *out, ib_error_t *err)
{
    if (out->sas && (out->key || out->key_name))
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: SharedAccessSignature excludes "
                            "SharedAccessKeyName and SharedAccessKey");
    /* Half a key pair is not; the SAS token provider refuses a string without one. */
    if (!out->sas && !out->key != !out->key_name)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: %s is missing (SharedAccessKeyName and "
                            "SharedAccessKey go together)",
                            out->key ? "SharedAccessKeyName" : "SharedAccessKey");
    if ((out->key && !*out->key) || (out->key_name && !*out->key_name) || (out->sas && !*out->sas))
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string: a credential value is empty");
    return IB_E_OK;
}

ib_err_t sb_connstr_parse(const char *s, sb_connstr_t *out, ib_error_t *err)
{
    char *copy, *cursor, *part, *endpoint = NULL, *emu = NULL, *tt = NULL;
    ib_err_t rc = IB_E_OK;

    memset(out, 0, sizeof(*out));
    if (!s || !*s)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT, "connection string is empty");
    if (strlen(s) > CONNSTR_MAX)
        return ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                            "connection string is longer than %d bytes", CONNSTR_MAX);
    copy = strdup(s);
    if (!copy)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");

    cursor = copy;
    while (rc == IB_E_OK && (part = strsep(&cursor, ";")) != NULL) {
        char *eq, *key, *val;
        part = trim(part);
        if (!*part)
            continue;
        eq = strchr(part, '=');
        if (!eq) {
            rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                              "connection string: a part has no '=' (expected Key=Value)");
            break;
        }
        *eq = '\0';
        key = trim(part);
        val = trim(eq + 1);
        if (strcasecmp(key, "Endpoint") == 0)
            rc = take(&endpoint, "Endpoint", val, err);
        else if (strcasecmp(key, "SharedAccessKeyName") == 0)
            rc = take(&out->key_name, "SharedAccessKeyName", val, err);
        else if (strcasecmp(key, "SharedAccessKey") == 0)
            rc = take(&out->key, "SharedAccessKey", val, err);
        else if (strcasecmp(key, "SharedAccessSignature") == 0)
            rc = take(&out->sas, "SharedAccessSignature", val, err);
        else if (strcasecmp(key, "EntityPath") == 0)
            rc = take(&out->entity_path, "EntityPath", val, err);
        else if (strcasecmp(key, "UseDevelopmentEmulator") == 0)
            rc = take(&emu, "UseDevelopmentEmulator", val, err);
        else if (strcasecmp(key, "TransportType") == 0)
            rc = take(&tt, "TransportType", val, err);
        else if (!*key)
            rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                              "connection string: a part has an empty key");
    }
    if (rc == IB_E_OK && !endpoint)
        rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                          "connection string: Endpoint is missing");
    if (rc == IB_E_OK)
        rc = parse_endpoint(endpoint, out, err);
    if (rc == IB_E_OK && emu)
        rc = switch_value(emu, "UseDevelopmentEmulator", "true", "false", &out->emulator, err);
    if (rc == IB_E_OK && tt)
        rc = switch_value(tt, "TransportType", "AmqpWebSockets", "Amqp", &out->websockets, err);
    if (rc == IB_E_OK)
        rc = check_credentials(out, err);
    if (rc == IB_E_OK && out->entity_path && !*out->entity_path)
        rc = ib_error_set(err, IB_E_CONFIG, IB_CLASS_PERMANENT,
                          "connection string: EntityPath is empty");
    if (rc == IB_E_OK) {
        size_t n = strlen(out->host) + 16;
        if (!out->port_given)
            out->port = out->emulator ? 5672 : 5671;
        out->endpoint = malloc(n);
        if (!out->endpoint)
            rc = ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        else if (out->port_given)
            snprintf(out->endpoint, n, "sb://%s:%d/", out->host, out->port);
        else
            snprintf(out->endpoint, n, "sb://%s/", out->host);
    }
    free(endpoint);
    free(emu);
    free(tt);
    free(copy);
    if (rc != IB_E_OK)
        sb_connstr_free(out);
    return rc;
}

void sb_connstr_free(sb_connstr_t *cs)
{
    if (!cs)
        return;
    free(cs->host);
    free(cs->endpoint);
    free(cs->key_name);
    if (cs->key)
        memset(cs->key, 0, strlen(cs->key));
    free(cs->key);
    if (cs->sas)
        memset(cs->sas, 0, strlen(cs->sas));
    free(cs->sas);
    free(cs->entity_path);
    memset(cs, 0, sizeof(*cs));
}
