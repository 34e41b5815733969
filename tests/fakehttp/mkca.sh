#!/bin/sh
# mkca.sh DIR - a throwaway CA (DIR/ca.crt) and a server certificate for
# 127.0.0.1 and localhost signed by it (DIR/srv.crt, DIR/srv.key), made with
# the openssl CLI, plus a second CA (DIR/other-ca.crt) that signed nothing.
set -eu
dir=$1
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=inboxd-test-ca -keyout ca.key -out ca.crt 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=inboxd-other-ca -keyout other-ca.key -out other-ca.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -subj /CN=127.0.0.1 -keyout srv.key -out srv.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >srv.ext
openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile srv.ext -out srv.crt 2>/dev/null
