/*
 * ib_tls.h - where inboxd's TLS clients (libcurl's and Proton's) find the
 * system's trusted CA certificates at the least cost.
 *
 * Reading the system's CA bundle (some 140 certificates in one PEM file)
 * costs about 30 ms of CPU for each client that loads it: each HTTP client,
 * the AMQP connection, the entity poller's fetch every entity_poll_s. The
 * hashed directory of the same certificates (SSL_CERT_DIR, or OpenSSL's
 * default, /etc/ssl/certs on Debian) is read one certificate at a time, only
 * those a peer's chain names. Same trust, a fraction of the work.
 *
 * thread: any (reads the environment on each call; a directory is read
 * once, when it is first named).
 */
#ifndef IB_TLS_H
#define IB_TLS_H

/*
 * The hashed CA directory to trust when no CA file is configured: SSL_CERT_DIR
 * or OpenSSL's default directory, when it holds a certificate under a hashed
 * name (8 hex digits, ".", a digit). NULL when there is none: the caller
 * keeps its default (libcurl's compiled-in bundle, Proton's the system's).
 */
const char *ib_tls_system_ca_dir(void);

/*
 * Sets libcurl handle curl (a CURL *) to trust ca_file when given, else the
 * hashed system directory instead of libcurl's compiled-in bundle, else
 * leaves libcurl's default.
 */
void ib_tls_curl_trust(void *curl, const char *ca_file);

#endif
