#!/usr/bin/env bash
# Makes a test certificate authority and one certificate per site for longhaul's mutual TLS.
#
#   tools/make-certs.sh OUTDIR SITE [SITE...]
#
# Writes OUTDIR/ca.pem (+ ca.key) and OUTDIR/SITE.pem, OUTDIR/SITE.key for each site. The
# site name is the certificate's common name and its DNS subject alternative name: peers
# check it against the name in their config. An existing OUTDIR/ca.pem is reused, so sites
# can be added later. For testing and demos; production sites use their own PKI.
set -euo pipefail

if [ $# -lt 2 ] || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
command -v openssl >/dev/null || { echo "make-certs: openssl not found (run tools/setup.sh)" >&2; exit 1; }

out=$1
shift
mkdir -p "$out"
umask 077

if [ ! -f "$out/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -subj "/CN=longhaul test CA" -keyout "$out/ca.key" -out "$out/ca.pem" 2>/dev/null
fi

for site in "$@"; do
  if ! [[ "$site" =~ ^[a-z0-9][a-z0-9-]{0,62}$ ]]; then
    echo "make-certs: '$site' is not a valid site name" >&2
    exit 1
  fi
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=$site" -keyout "$out/$site.key" -out "$out/$site.csr" 2>/dev/null
  printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$site" >"$out/$site.ext"
  openssl x509 -req -in "$out/$site.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" \
    -CAcreateserial -days 3650 -extfile "$out/$site.ext" -out "$out/$site.pem" 2>/dev/null
  rm -f "$out/$site.csr" "$out/$site.ext"
done
chmod 644 "$out"/*.pem
chmod 600 "$out"/*.key
echo "make-certs: wrote CA and certificates for: $* in $out" >&2
