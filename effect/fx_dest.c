/*
 * fx_dest.c - the destination key of a URL (see fx_dest.h). thread: any.
 */
#include "fx_dest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool fx_dest_key(const char *url, char *key, size_t size)
{
    const char *hs = strstr(url, "://");
    if (!hs)
        return false;
    size_t slen = (size_t)(hs - url);
    const char *host = hs + 3;
    size_t alen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', alen); /* userinfo is not part of the destination */
    if (at) {
        alen -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    if (alen == 0 || slen == 0)
        return false;
    const char *colon = NULL;
    for (const char *c = host; c < host + alen; c++)
        if (*c == ':')
            colon = c;
        else if (*c == ']')
            colon = NULL; /* an IPv6 literal's colons */
    size_t hlen = colon ? (size_t)(colon - host) : alen;
    const char *port = colon ? colon + 1 : (slen == 5 && strncasecmp(url, "https", 5) == 0 ? "443" : "80");
    size_t plen = colon ? alen - hlen - 1 : strlen(port);
    int n = snprintf(key, size, "%.*s://%.*s:%.*s", (int)slen, url, (int)hlen, host, (int)plen,
                     port);
    if (n < 0 || (size_t)n >= size)
        return false;
    for (char *c = key; *c; c++) {
        *c = (char)tolower((unsigned char)*c);
        if (!isalnum((unsigned char)*c) && !strchr(":/.-_[]%", *c))
            return false; /* never a quote or a backslash in a metric label */
    }
    return true;
}
