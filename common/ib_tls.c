/*
 * ib_tls.c - the system CA directory for TLS clients (see ib_tls.h).
 *
 * thread: any (the directory's answer is kept under a mutex).
 */
#include "ib_tls.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* "5ad8a5d6.0": the subject hash OpenSSL looks a certificate up by. */
static bool hashed_name(const char *name)
{
    for (int i = 0; i < 8; i++)
        if (!isxdigit((unsigned char)name[i]))
            return false;
    return name[8] == '.' && isdigit((unsigned char)name[9]) && name[10] == '\0';
}

static bool holds_hashed(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
        found = hashed_name(e->d_name);
    closedir(d);
    return found;
}

/* The answer for one directory, kept: an HTTP route asks for every call. */
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static char cache_dir[4096];
static bool cache_usable, cache_set;

const char *ib_tls_system_ca_dir(void)
{
    const char *dir = getenv(X509_get_default_cert_dir_env());
    if (!dir || !*dir)
        dir = X509_get_default_cert_dir();
    if (strchr(dir, ':')) /* a list: OpenSSL reads each, as given */
        return dir;
    if (strlen(dir) >= sizeof cache_dir)
        return holds_hashed(dir) ? dir : NULL;
    pthread_mutex_lock(&cache_mu);
    if (!cache_set || strcmp(cache_dir, dir) != 0) {
        strcpy(cache_dir, dir);
        cache_usable = holds_hashed(dir);
        cache_set = true;
    }
    bool usable = cache_usable;
    pthread_mutex_unlock(&cache_mu);
    return usable ? dir : NULL;
}

void ib_tls_curl_trust(void *curl, const char *ca_file)
{
    CURL *c = curl;
    if (ca_file && *ca_file) {
        curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
        return;
    }
    const char *dir = ib_tls_system_ca_dir();
    if (!dir)
        return;
    curl_easy_setopt(c, CURLOPT_CAINFO, NULL);
    curl_easy_setopt(c, CURLOPT_CAPATH, dir);
}
