// Checks of a site's TLS material (tls.ca, tls.cert, tls.key) before anything listens, so that
// a wrong file fails `longhauld --check` and the start with what is wrong, instead of passing
// and then failing as "cannot listen" after a raw gRPC log line, or serving with a
// certificate that peers refuse.
#pragma once

#include <ctime>
#include <string>

#include "common/status.h"
#include "daemon/config.h"

namespace longhaul::daemon {

// OK when the TLS files of site `site` are usable for mutual TLS between sites:
//  - tls.ca holds one or more PEM certificates;
//  - tls.cert holds PEM certificates: the site's own first, then any intermediates;
//  - tls.key holds an unencrypted PEM private key, the key of tls.cert's certificate;
//  - tls.cert names `site` the way peers check it (daemon/peer_security.h): a peer that dials
//    this site checks, as gRPC does, its SAN names when the certificate has any and its CN
//    only when it has none; one of those must be exactly `site`;
//  - tls.cert may serve both TLS server and client authentication (a site is both: it
//    answers peers and dials them), as far as its key usage extensions say;
//  - tls.cert is within its validity dates at `now`, and chains to a certificate of tls.ca
//    (through the intermediates in tls.cert; a certificate of tls.ca may itself be an
//    intermediate, as gRPC allows), every certificate of the chain valid at `now`.
// Otherwise an error whose message names the key and the path as written in the config, and
// says what is wrong: "tls.key 'certs/alpha.key' does not match tls.cert 'certs/alpha.pem'
// ...", "tls.cert 'x.pem' names 'beta' (CN/SAN), this site is 'alpha'", "tls.cert ... is not
// signed by tls.ca ...", "tls.cert ... expired on 2020-01-01 00:00:00 UTC ...".
// InvalidArgument, or the errno-derived code of a file that cannot be read. Callers add the
// site and the config ("site 'alpha': ...").
Status CheckTlsMaterial(const TlsConfig& tls, const std::string& site,
                        std::time_t now = std::time(nullptr));

}  // namespace longhaul::daemon
